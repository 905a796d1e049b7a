// The hybrid transport beyond the conformance suite: per-peer routes in a layout where every
// rank has peers on both transports, traffic between all pairs, RecvFromAny on one side and its
// known limit across both, Abort of both sides, host identities and CHORUS_TRANSPORT.
#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "chorus/transport/device_from_env.h"
#include "chorus/transport/hybrid/host_identity.h"
#include "chorus/transport/hybrid/hybrid_mesh.h"
#include "chorus/transport/shm/segment.h"
#include "tests/transport/captured_log.h"
#include "tests/transport/scenario.h"
#include "tests/transport/scoped_env.h"

namespace chorus::testing {
namespace {

constexpr int kRanks = 4;

Deadline WaitDeadline() { return Deadline::After(absl::Seconds(30)); }

// Ranks {0, 1} on one host and {2, 3} on another.
int HostOf(int rank) { return rank / 2; }

// Runs `body` on kRanks ranks of the two-host layout, as threads and as processes.
void RunTwoHosts(const ScenarioBody& body) {
  const TransportFactory transport = HybridTransport("hybrid-2x2", HostOf);
  for (RankMode mode : {RankMode::kThreads, RankMode::kProcesses}) {
    DYNAMIC_SECTION((mode == RankMode::kThreads ? "threads" : "processes")) {
      const std::vector<absl::Status> statuses = RunScenarioOnce(transport, mode, kRanks, body);
      for (size_t rank = 0; rank < statuses.size(); ++rank) {
        INFO("rank " << rank << ": " << statuses[rank].ToString());
        CHECK(statuses[rank].ok());
      }
    }
  }
}

absl::StatusOr<HybridMesh*> AsHybrid(RankEnv& env) {
  auto* mesh = dynamic_cast<HybridMesh*>(&env.m());
  if (mesh == nullptr) return InternalError("the mesh is not a HybridMesh");
  return mesh;
}

TEST_CASE("hybrid routes same-host peers to shm and the others to tcp", "[hybrid]") {
  RunTwoHosts([](RankEnv& env) -> absl::Status {
    CHORUS_ASSIGN_OR_RETURN(HybridMesh * mesh, AsHybrid(env));
    for (int peer = 0; peer < kRanks; ++peer) {
      const absl::string_view expected = peer == env.rank                   ? ""
                                         : HostOf(peer) == HostOf(env.rank) ? "shm"
                                                                            : "tcp";
      SCENARIO_EXPECT(mesh->RouteTo(peer) == expected, "rank ", env.rank, " to ", peer, ": ",
                      mesh->RouteTo(peer));
      SCENARIO_EXPECT(mesh->HostOf(peer) == HostOf(peer), "host of rank ", peer, ": ",
                      mesh->HostOf(peer));
    }
    const std::string expected_layout = env.rank == 0   ? "rank 0 of 4: shm to 1; tcp to 2-3"
                                        : env.rank == 3 ? "rank 3 of 4: shm to 2; tcp to 0-1"
                                                        : "";
    SCENARIO_EXPECT(expected_layout.empty() || mesh->DescribeLayout() == expected_layout,
                    mesh->DescribeLayout());
    // Every pair, both directions, small (eager) and large (single-copy / zero-copy) messages.
    std::vector<std::vector<uint8_t>> outgoing(kRanks);
    std::vector<std::vector<uint8_t>> incoming(kRanks);
    std::vector<RequestPtr> requests;
    auto size_of = [](int from, int to) -> size_t { return (from + to) % 2 ? 100 : 300 * 1024; };
    for (int peer = 0; peer < kRanks; ++peer) {
      if (peer == env.rank) continue;
      CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(peer));
      outgoing[peer] = Pattern(env.rank * 10 + peer, size_of(env.rank, peer));
      incoming[peer].assign(size_of(peer, env.rank), 0);
      requests.push_back(connection->Recv(3, incoming[peer].data(), incoming[peer].size()));
      requests.push_back(connection->Send(3, outgoing[peer].data(), outgoing[peer].size()));
    }
    CHORUS_RETURN_IF_ERROR(WaitAll(requests, WaitDeadline()));
    for (int peer = 0; peer < kRanks; ++peer) {
      if (peer == env.rank) continue;
      const std::string diff =
          CheckPattern(incoming[peer].data(), incoming[peer].size(), peer * 10 + env.rank);
      SCENARIO_EXPECT(diff.empty(), "from rank ", peer, ": ", diff);
    }
    return Barrier(env, "done");
  });
}

TEST_CASE("hybrid RecvFromAny delegates within one side and refuses peers of both", "[hybrid]") {
  RunTwoHosts([](RankEnv& env) -> absl::Status {
    if (env.rank != 0) {
      CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(0));
      const std::vector<uint8_t> data = Pattern(env.rank, 64);
      CHORUS_RETURN_IF_ERROR(connection->Send(20, data.data(), data.size())->Wait(WaitDeadline()));
      return Barrier(env, "done");
    }
    std::vector<uint8_t> buffer(64);
    const std::vector<int> mixed = {1, 2, 3};
    RequestPtr refused = env.m().RecvFromAny(mixed, 20, MemoryRef{buffer.data(), buffer.size()});
    SCENARIO_EXPECT(refused->IsDone(), "a mixed RecvFromAny was posted");
    SCENARIO_EXPECT(GetErrorKind(refused->status()) == ErrorKind::kInvalidArgument,
                    refused->status().ToString());
    SCENARIO_EXPECT(absl::StrContains(refused->status().message(), "ranks 1 (shm) and 2,3 (tcp)"),
                    refused->status().ToString());
    // Nothing was consumed by the refused receive: one message from each sender is still there.
    const std::vector<int> local = {1};
    RequestPtr from_local = env.m().RecvFromAny(local, 20, MemoryRef{buffer.data(), 64});
    CHORUS_RETURN_IF_ERROR(from_local->Wait(WaitDeadline()));
    SCENARIO_EXPECT(from_local->peer() == 1 && CheckPattern(buffer.data(), 64, 1).empty(), "");
    const std::vector<int> remote = {2, 3};
    for (int i = 0; i < 2; ++i) {
      RequestPtr from_remote = env.m().RecvFromAny(remote, 20, MemoryRef{buffer.data(), 64});
      CHORUS_RETURN_IF_ERROR(from_remote->Wait(WaitDeadline()));
      const int peer = from_remote->peer();
      SCENARIO_EXPECT((peer == 2 || peer == 3) && CheckPattern(buffer.data(), 64, peer).empty(),
                      "from rank ", peer);
    }
    return Barrier(env, "done");
  });
}

TEST_CASE("hybrid Abort fails pending requests on both transports", "[hybrid]") {
  RunTwoHosts([](RankEnv& env) -> absl::Status {
    uint8_t byte = 0;
    if (env.rank == 0) {
      CHORUS_ASSIGN_OR_RETURN(Connection * local, env.To(1));
      CHORUS_ASSIGN_OR_RETURN(Connection * remote, env.To(2));
      RequestPtr on_shm = local->Recv(30, &byte, 1);
      RequestPtr on_tcp = remote->Recv(30, &byte, 1);
      env.m().Abort("the test aborts");
      for (const RequestPtr& request : {on_shm, on_tcp}) {
        const absl::Status status = request->Wait(WaitDeadline());
        SCENARIO_EXPECT(GetErrorKind(status) == ErrorKind::kAborted, status.ToString());
      }
    }
    return Barrier(env, "done");
  });
}

TEST_CASE("host identity: override, CHORUS_HOSTID, detected with the network namespace",
          "[hybrid]") {
  const std::string detected = DetectedHostIdentity();
  CHECK(absl::StartsWith(detected, shm::LocalHostIdentity()));
  CHECK(absl::EndsWith(detected, absl::StrCat("/", shm::NamespaceInode("net"))));
  CHECK(ResolveHostIdentity("") == detected);
  ScopedEnv env("CHORUS_HOSTID", "node-7");
  CHECK(ResolveHostIdentity("") == "node-7");
  CHECK(ResolveHostIdentity("given") == "given");
}

TEST_CASE("CHORUS_TRANSPORT picks the device; a bad value names the variable", "[hybrid]") {
  ScopedEnv address("CHORUS_TCP_ADDR", "127.0.0.1");
  for (const auto& [value, kind] : std::vector<std::pair<std::string, std::string>>{
           {"auto", "hybrid"}, {"tcp", "tcp"}, {"shm", "shm"}}) {
    ScopedEnv transport("CHORUS_TRANSPORT", value.c_str());
    absl::StatusOr<std::unique_ptr<Device>> device = CreateDeviceFromEnv();
    INFO(value << ": " << device.status().ToString());
    REQUIRE(device.ok());
    CHECK((*device)->kind() == kind);
  }
  ScopedEnv transport("CHORUS_TRANSPORT", "ib");
  const absl::Status status = CreateDeviceFromEnv().status();
  CHECK(GetErrorKind(status) == ErrorKind::kInvalidArgument);
  CHECK(absl::StrContains(status.message(), "CHORUS_TRANSPORT"));
  CHECK(absl::StrContains(status.message(), "'ib'"));
}

TEST_CASE("the hybrid layout is logged once at info", "[hybrid]") {
  CapturedLog log("info");
  RunTwoHosts([](RankEnv& env) -> absl::Status { return Barrier(env, "done"); });
  const std::string text = log.Read();
  CHECK(absl::StrContains(text, "rank 0 of 4: shm to 1; tcp to 2-3"));
  CHECK(absl::StrContains(text, "rank 2 of 4: shm to 3; tcp to 0-1"));
}

}  // namespace
}  // namespace chorus::testing
