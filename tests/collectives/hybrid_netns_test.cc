// Two simulated hosts on this machine (network namespaces joined by a bridge, NetnsHosts), two
// rank processes in each, over the hybrid transport with detected host identities: shared
// memory within a namespace, TCP between the namespaces' addresses. Allreduce, allgather and
// broadcast with every algorithm are checked exactly. Skipped, with a warning, where network
// namespaces cannot be created (not root, no iproute2).
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

namespace chorus::testing {
namespace {

constexpr int kHosts = 2;
constexpr int kRanksPerHost = 2;
constexpr int kRanks = kHosts * kRanksPerHost;
constexpr absl::Duration kSetupTimeout = absl::Seconds(30);
// Bounds the whole run; a rank still running then is killed and reported.
constexpr absl::Duration kRunTimeout = absl::Minutes(3);

int HostOf(int rank) { return rank / kRanksPerHost; }

// In a forked rank: enter the rank's namespace, then make the devices, so the TCP device
// listens on the namespace's address and the detected host identity is the namespace's.
absl::StatusOr<std::unique_ptr<Device>> EnterHostAndCreateDevice(const NetnsHosts& hosts,
                                                                 int rank) {
  CHORUS_RETURN_IF_ERROR(hosts.Enter(HostOf(rank)));
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> local, CreateShmDevice());
  tcp::TcpDeviceOptions options;
  options.address = hosts.address(HostOf(rank));
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> network, tcp::CreateTcpDevice(options));
  return CreateHybridDevice(std::move(local), std::move(network));
}

// The routes the detected identities give: shm to the rank of the same namespace, tcp to the
// others.
absl::Status CheckRoutes(Device& device, Store& store, int rank) {
  PrefixStore routes_store("routes", store);
  CHORUS_ASSIGN_OR_RETURN(
      std::unique_ptr<Mesh> mesh,
      device.CreateMesh(routes_store, rank, kRanks, {}, Deadline::After(kSetupTimeout)));
  const auto* hybrid = dynamic_cast<const HybridMesh*>(mesh.get());
  if (hybrid == nullptr) return InternalError("the hybrid device made a mesh of another kind");
  for (int peer = 0; peer < kRanks; ++peer) {
    if (peer == rank) continue;
    const absl::string_view expected = HostOf(peer) == HostOf(rank) ? "shm" : "tcp";
    if (hybrid->RouteTo(peer) != expected) {
      return InternalError(absl::StrCat("rank ", rank, " reaches rank ", peer, " over ",
                                        hybrid->RouteTo(peer), ", expected ", expected, " (",
                                        hybrid->DescribeLayout(), ")"));
    }
  }
  return absl::OkStatus();
}

TEST_CASE("collectives across network namespaces: shm within a namespace, tcp between", "[netns]") {
  absl::StatusOr<std::unique_ptr<NetnsHosts>> hosts = NetnsHosts::Create(kHosts);
  if (!hosts.ok()) {
    WARN("SKIPPED: cannot create network namespaces (needs root and iproute2): "
         << hosts.status().ToString());
    return;
  }
  Matrix matrix;
  matrix.kinds = {CollectiveKind::kAllReduce, CollectiveKind::kAllGather,
                  CollectiveKind::kBroadcast};
  matrix.types = {DataType::kInt32, DataType::kFloat32};
  matrix.ops = {ReduceOp::kSum, ReduceOp::kMax};
  // Up to 1 MiB per rank: large enough for the shm single-copy path and the TCP zero-copy path.
  matrix.counts = {0, 7, 1000, 1 << 18};
  const std::vector<Case> cases = BuildCases(matrix, kRanks);
  TempDir directory;
  RankProcesses processes(kRanks, [&](int rank) -> absl::Status {
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                            EnterHostAndCreateDevice(**hosts, rank));
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store, FileStore::Open(directory.path()));
    CHORUS_RETURN_IF_ERROR(CheckRoutes(*device, *store, rank));
    CommunicatorOptions options;
    options.connect_timeout = kSetupTimeout;
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                            Communicator::Create(*store, "netns", *device, rank, kRanks, options));
    return RunCases(*comm, cases);
  });
  for (const ProcessOutcome& outcome : processes.Wait(kRunTimeout)) {
    INFO(outcome.Describe());
    CHECK(outcome.ok());
  }
}

}  // namespace
}  // namespace chorus::testing
