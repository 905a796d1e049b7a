// Simulated hosts on this machine (network namespaces joined by a bridge, NetnsHosts), rank
// processes in each (two per host, and an uneven layout), over the hybrid transport with detected
// host identities: shared memory within a namespace, TCP between the namespaces' addresses.
// Allreduce, allgather and broadcast with every algorithm are checked exactly; so is every
// collective of the hierarchical algorithm, which must also be the selector's choice there and
// be seen (debug log) running phases within and between the namespaces. Skipped, with a
// warning, where network namespaces cannot be created (not root, no iproute2).
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/collectives/communicator.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/file_store.h"
#include "chorus/rendezvous/prefix_store.h"
#include "chorus/transport/hybrid/hybrid_device.h"
#include "chorus/transport/hybrid/hybrid_mesh.h"
#include "chorus/transport/shm/shm_device.h"
#include "chorus/transport/tcp/tcp_device.h"
#include "tests/collectives/cases.h"
#include "tests/harness/multirank.h"
#include "tests/harness/netns_hosts.h"
#include "tests/transport/captured_log.h"

namespace chorus::testing {
namespace {

constexpr absl::Duration kSetupTimeout = absl::Seconds(30);
// Bounds a whole run; a rank still running then is killed and reported.
constexpr absl::Duration kRunTimeout = absl::Minutes(3);

// In a forked rank: enter the rank's namespace, then make the devices, so the TCP device
// listens on the namespace's address and the detected host identity is the namespace's.
absl::StatusOr<std::unique_ptr<Device>> EnterHostAndCreateDevice(const NetnsHosts& hosts,
                                                                 int host) {
  CHORUS_RETURN_IF_ERROR(hosts.Enter(host));
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> local, shm::CreateShmDevice());
  tcp::TcpDeviceOptions options;
  options.address = hosts.address(host);
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> network, tcp::CreateTcpDevice(options));
  return CreateHybridDevice(std::move(local), std::move(network));
}

// The routes the detected identities give: shm to the ranks of the same namespace, tcp to the
// others; host numbers as `host_of` has them (hosts are numbered by their lowest rank).
absl::Status CheckRoutes(Device& device, Store& store, int rank, const std::vector<int>& host_of) {
  const int size = static_cast<int>(host_of.size());
  PrefixStore routes_store("routes", store);
  CHORUS_ASSIGN_OR_RETURN(
      std::unique_ptr<Mesh> mesh,
      device.CreateMesh(routes_store, rank, size, {}, Deadline::After(kSetupTimeout)));
  const auto* hybrid = dynamic_cast<const HybridMesh*>(mesh.get());
  if (hybrid == nullptr) return InternalError("the hybrid device made a mesh of another kind");
  for (int peer = 0; peer < size; ++peer) {
    const absl::string_view expected = peer == rank                     ? ""
                                       : host_of[peer] == host_of[rank] ? "shm"
                                                                        : "tcp";
    if (hybrid->RouteTo(peer) != expected || hybrid->HostOf(peer) != host_of[peer]) {
      return InternalError(absl::StrCat("rank ", rank, " reaches rank ", peer, " over '",
                                        hybrid->RouteTo(peer), "' on host ", hybrid->HostOf(peer),
                                        ", expected '", expected, "' on host ", host_of[peer], " (",
                                        hybrid->DescribeLayout(), ")"));
    }
  }
  return absl::OkStatus();
}

// Host numbers by rank for `ranks_per_host`, ranks numbered host by host.
std::vector<int> HostOfRanks(const std::vector<int>& ranks_per_host) {
  std::vector<int> host_of;
  for (int host = 0; host < static_cast<int>(ranks_per_host.size()); ++host) {
    host_of.insert(host_of.end(), ranks_per_host[host], host);
  }
  return host_of;
}

// One namespace per host, or null after a warning saying why the test is skipped.
std::unique_ptr<NetnsHosts> CreateHostsOrWarn(size_t hosts) {
  absl::StatusOr<std::unique_ptr<NetnsHosts>> created = NetnsHosts::Create(static_cast<int>(hosts));
  if (!created.ok()) {
    WARN("SKIPPED: cannot create network namespaces (needs root and iproute2): "
         << created.status().ToString());
    return nullptr;
  }
  return *std::move(created);
}

// Allreduce, allgather and broadcast, every algorithm, on ranks spread over namespaces as
// `ranks_per_host` says (ranks numbered host by host).
void RunAcrossNamespaces(const std::vector<int>& ranks_per_host) {
  const std::vector<int> host_of = HostOfRanks(ranks_per_host);
  const int size = static_cast<int>(host_of.size());
  const std::unique_ptr<NetnsHosts> hosts = CreateHostsOrWarn(ranks_per_host.size());
  if (hosts == nullptr) return;
  Matrix matrix;
  matrix.kinds = {CollectiveKind::kAllReduce, CollectiveKind::kAllGather,
                  CollectiveKind::kBroadcast};
  matrix.types = {DataType::kInt32, DataType::kFloat32};
  matrix.ops = {ReduceOp::kSum, ReduceOp::kMax};
  // Up to 1 MiB per rank: large enough for the shm single-copy path and the TCP zero-copy path.
  matrix.counts = {0, 7, 1000, 1 << 18};
  const std::vector<Case> cases = BuildCases(matrix, size);
  TempDir directory;
  RankProcesses processes(size, [&](int rank) -> absl::Status {
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                            EnterHostAndCreateDevice(*hosts, host_of[rank]));
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store, FileStore::Open(directory.path()));
    CHORUS_RETURN_IF_ERROR(CheckRoutes(*device, *store, rank, host_of));
    CommunicatorOptions options;
    options.connect_timeout = kSetupTimeout;
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                            Communicator::Create(*store, "netns", *device, rank, size, options));
    return RunCases(*comm, cases);
  });
  INFO(cases.size() << " cases");
  for (const ProcessOutcome& outcome : processes.Wait(kRunTimeout)) {
    INFO(outcome.Describe());
    CHECK(outcome.ok());
  }
}

// The hierarchical algorithm on ranks spread over namespaces as `ranks_per_host` says: every
// collective it implements, forced, checked exactly; the selector's own choice where hosts hold
// several ranks; and, from the debug log, that its phases really ran within and between hosts.
void RunHierarchicalAcrossNamespaces(const std::vector<int>& ranks_per_host) {
  const std::vector<int> host_of = HostOfRanks(ranks_per_host);
  const int size = static_cast<int>(host_of.size());
  const std::unique_ptr<NetnsHosts> hosts = CreateHostsOrWarn(ranks_per_host.size());
  if (hosts == nullptr) return;
  const std::vector<CollectiveKind> kinds = {
      CollectiveKind::kAllReduce,     CollectiveKind::kBroadcast,  CollectiveKind::kReduce,
      CollectiveKind::kAllGather,     CollectiveKind::kAllGatherV, CollectiveKind::kReduceScatter,
      CollectiveKind::kReduceScatterV};
  Matrix matrix;
  matrix.kinds = kinds;
  matrix.algorithms = {"hierarchical"};
  matrix.types = {DataType::kInt32, DataType::kBFloat16};
  matrix.ops = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg};
  matrix.counts = {0, 7, 1001, (1 << 18) + 3};
  const std::vector<Case> cases = BuildCases(matrix, size);
  // Before any device exists; the forked ranks inherit it and write a file each.
  CapturedLog log("debug");
  TempDir directory;
  RankProcesses processes(size, [&](int rank) -> absl::Status {
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                            EnterHostAndCreateDevice(*hosts, host_of[rank]));
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store, FileStore::Open(directory.path()));
    CommunicatorOptions options;
    options.connect_timeout = kSetupTimeout;
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                            Communicator::Create(*store, "netns", *device, rank, size, options));
    for (CollectiveKind kind : kinds) {
      CHORUS_ASSIGN_OR_RETURN(const std::string chosen, comm->ChooseAlgorithm(kind, 1 << 20));
      if (chosen != "hierarchical") {
        return InternalError(absl::StrCat(CollectiveKindName(kind), " of 1 MiB across ",
                                          ranks_per_host.size(), " namespaces chose ", chosen));
      }
    }
    CHORUS_RETURN_IF_ERROR(RunCases(*comm, cases));
    std::vector<int32_t> data(1000, rank + 1);
    WorkPtr work = comm->AllReduceAsync(data.data(), data.data(), data.size(), DataType::kInt32,
                                        ReduceOp::kSum);
    CHORUS_RETURN_IF_ERROR(work->Wait());
    if (work->algorithm() != "hierarchical" || data[999] != size * (size + 1) / 2) {
      return InternalError(absl::StrCat("the selector's allreduce ran ", work->algorithm(),
                                        " and gave ", data[999]));
    }
    return absl::OkStatus();
  });
  INFO(cases.size() << " cases");
  for (const ProcessOutcome& outcome : processes.Wait(kRunTimeout)) {
    INFO(outcome.Describe());
    CHECK(outcome.ok());
  }
  const std::string text = log.Read();
  for (CollectiveKind kind : kinds) {
    const std::string name(CollectiveKindName(kind));
    INFO(name);
    CHECK(absl::StrContains(text, absl::StrCat(name, " #")));
    CHECK(absl::StrContains(text, "(hierarchical, "));
  }
  // Every kind has a phase between hosts and one within a host of two ranks.
  CHECK(absl::StrContains(text, "between hosts, allreduce by"));
  CHECK(absl::StrContains(text, "between hosts, broadcast by"));
  CHECK(absl::StrContains(text, "between hosts, reduce by"));
  CHECK(absl::StrContains(text, "between hosts, allgather"));
  CHECK(absl::StrContains(text, "between hosts, reduce_scatter"));
  CHECK(absl::StrContains(text, "within host 0, "));
}

TEST_CASE("collectives across 2 namespaces of 2 ranks: shm within, tcp between", "[netns]") {
  RunAcrossNamespaces({2, 2});
}

TEST_CASE("collectives across 3 namespaces of 2, 1 and 2 ranks", "[netns]") {
  RunAcrossNamespaces({2, 1, 2});
}

TEST_CASE("hierarchical collectives across 2 namespaces of 2 ranks", "[netns]") {
  RunHierarchicalAcrossNamespaces({2, 2});
}

TEST_CASE("hierarchical collectives across 3 namespaces of 2, 1 and 2 ranks", "[netns]") {
  RunHierarchicalAcrossNamespaces({2, 1, 2});
}

}  // namespace
}  // namespace chorus::testing
