// The hybrid transport beyond the conformance suite: per-peer routes in a layout where every
// rank has peers on both transports, traffic between all pairs, RecvFromAny over peers of both
// transports, Abort of both sides, host identities and CHORUS_TRANSPORT.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chorus/core/host_identity.h"
#include "chorus/core/status.h"
#include "chorus/transport/device_from_env.h"
#include "chorus/transport/hybrid/host_identity.h"
#include "chorus/transport/hybrid/hybrid_mesh.h"
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

// Rank 0's peers on both sides: rank 1 over shm, ranks 2 and 3 over tcp.
const std::vector<int>& MixedPeers() {
  static const auto* peers = new std::vector<int>{1, 2, 3};
  return *peers;
}

// Small (eager on both transports) from rank 2, large (shm's announced path, tcp's zero-copy
// path) from ranks 1 and 3.
size_t MixedSize(int sender) { return sender == 2 ? 100 : 200 * 1024; }
constexpr size_t kMixedCapacity = 200 * 1024;

// Three mixed RecvFromAny receives posted together: after they complete, each peer of
// MixedPeers() must have delivered its content (seed peer * 1000 + `seed`) exactly once.
class MixedReceives {
 public:
  MixedReceives(RankEnv& env, Tag tag) : tag_(tag) {
    for (auto& buffer : buffers_) {
      buffer.assign(kMixedCapacity, 0);
      receives_.push_back(
          env.m().RecvFromAny(MixedPeers(), tag, MemoryRef{buffer.data(), buffer.size()}));
    }
  }

  absl::Status Check(uint64_t seed) {
    CHORUS_RETURN_IF_ERROR(WaitAll(receives_, WaitDeadline()));
    std::vector<int> seen;
    for (size_t i = 0; i < receives_.size(); ++i) {
      const int peer = receives_[i]->peer();
      seen.push_back(peer);
      SCENARIO_EXPECT(peer >= 1 && peer <= 3 && receives_[i]->bytes() == MixedSize(peer), "tag ",
                      tag_, ": ", receives_[i]->bytes(), " bytes from rank ", peer);
      if (peer < 1 || peer > 3) continue;
      const std::string diff =
          CheckPattern(buffers_[i].data(), MixedSize(peer), peer * 1000 + seed);
      SCENARIO_EXPECT(diff.empty(), "tag ", tag_, " from rank ", peer, ": ", diff);
    }
    std::sort(seen.begin(), seen.end());
    SCENARIO_EXPECT(seen == MixedPeers(), "tag ", tag_, ": senders ", absl::StrJoin(seen, ","));
    return absl::OkStatus();
  }

 private:
  const Tag tag_;
  std::vector<uint8_t> buffers_[3];
  std::vector<RequestPtr> receives_;
};

absl::Status SendMixed(RankEnv& env, Tag tag, uint64_t seed) {
  CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(0));
  const std::vector<uint8_t> data = Pattern(env.rank * 1000 + seed, MixedSize(env.rank));
  return connection->Send(tag, data.data(), data.size())->Wait(WaitDeadline());
}

TEST_CASE("hybrid RecvFromAny over peers of both transports takes exactly one message",
          "[hybrid]") {
  RunTwoHosts([](RankEnv& env) -> absl::Status {
    if (env.rank != 0) {
      CHORUS_RETURN_IF_ERROR(Barrier(env, "posted"));
      CHORUS_RETURN_IF_ERROR(SendMixed(env, 20, 20));  // to receives posted first
      CHORUS_RETURN_IF_ERROR(SendMixed(env, 21, 21));  // before their receives
      CHORUS_RETURN_IF_ERROR(SendMixed(env, 22, 22));
      CHORUS_RETURN_IF_ERROR(Barrier(env, "sent"));
      CHORUS_RETURN_IF_ERROR(Barrier(env, "cancelled"));
      CHORUS_RETURN_IF_ERROR(SendMixed(env, 23, 23));
      return Barrier(env, "done");
    }
    // Posted before the messages come: the three receives race for messages on both sides.
    MixedReceives posted_first(env, 20);
    CHORUS_RETURN_IF_ERROR(Barrier(env, "posted"));
    CHORUS_RETURN_IF_ERROR(posted_first.Check(20));
    CHORUS_RETURN_IF_ERROR(Barrier(env, "sent"));
    // Posted after the messages are here, on both sides.
    CHORUS_RETURN_IF_ERROR(MixedReceives(env, 21).Check(21));
    // Exactly one: after one mixed receive, the sender it took has nothing left on tag 22, and
    // the other two still have theirs.
    std::vector<uint8_t> buffer(kMixedCapacity);
    RequestPtr any = env.m().RecvFromAny(MixedPeers(), 22, MemoryRef{buffer.data(), buffer.size()});
    CHORUS_RETURN_IF_ERROR(any->Wait(WaitDeadline()));
    const int taken = any->peer();
    SCENARIO_EXPECT(taken >= 1 && taken <= 3, "took rank ", taken);
    for (int peer : MixedPeers()) {
      CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(peer));
      RequestPtr recv = connection->Recv(22, buffer.data(), buffer.size());
      const absl::Status status =
          recv->Wait(peer == taken ? Deadline::After(absl::Milliseconds(200)) : WaitDeadline());
      if (peer == taken) {
        SCENARIO_EXPECT(GetErrorKind(status) == ErrorKind::kDeadlineExceeded,
                        "a second message from rank ", taken, ": ", status.ToString());
        recv->Cancel();
      } else {
        SCENARIO_EXPECT(
            status.ok() && CheckPattern(buffer.data(), MixedSize(peer), peer * 1000 + 22).empty(),
            "rank ", peer, ": ", status.ToString());
      }
    }
    // A deadline names every peer and its transport and leaves the receive pending; a cancelled
    // one consumes nothing.
    RequestPtr pending =
        env.m().RecvFromAny(MixedPeers(), 23, MemoryRef{buffer.data(), buffer.size()});
    const absl::Status late = pending->Wait(Deadline::After(absl::Milliseconds(100)));
    SCENARIO_EXPECT(GetErrorKind(late) == ErrorKind::kDeadlineExceeded, late.ToString());
    SCENARIO_EXPECT(absl::StrContains(late.message(), "any of ranks [1 (shm), 2,3 (tcp)]"),
                    late.ToString());
    SCENARIO_EXPECT(!pending->IsDone(), "a timed-out wait completed the receive");
    pending->Cancel();
    SCENARIO_EXPECT(pending->IsDone() && GetErrorKind(pending->status()) == ErrorKind::kAborted,
                    pending->status().ToString());
    CHORUS_RETURN_IF_ERROR(Barrier(env, "cancelled"));
    CHORUS_RETURN_IF_ERROR(MixedReceives(env, 23).Check(23));
    // Bad peer lists fail at once, also when they span both sides.
    for (const std::vector<int>& bad : {std::vector<int>{1, 2, 2}, std::vector<int>{1, 2, 7}}) {
      RequestPtr refused = env.m().RecvFromAny(bad, 24, MemoryRef{buffer.data(), 64});
      SCENARIO_EXPECT(
          refused->IsDone() && GetErrorKind(refused->status()) == ErrorKind::kInvalidArgument,
          refused->status().ToString());
    }
    return Barrier(env, "done");
  });
}

TEST_CASE("hybrid RecvFromAny across transports under racing senders loses and doubles nothing",
          "[hybrid]") {
  // Every round, all three peers send at once while rank 0 has three mixed receives posted,
  // so shm and tcp deliver concurrently and their parts contend for the same claims.
  constexpr int kRounds = 40;
  RunTwoHosts([](RankEnv& env) -> absl::Status {
    for (int round = 0; round < kRounds; ++round) {
      const Tag tag = 100 + round;
      if (env.rank == 0) {
        MixedReceives receives(env, tag);
        CHORUS_RETURN_IF_ERROR(Barrier(env, absl::StrCat("round ", round)));
        CHORUS_RETURN_IF_ERROR(receives.Check(round));
      } else {
        CHORUS_RETURN_IF_ERROR(Barrier(env, absl::StrCat("round ", round)));
        CHORUS_RETURN_IF_ERROR(SendMixed(env, tag, round));
      }
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
      RequestPtr on_both = env.m().RecvFromAny(MixedPeers(), 30, MemoryRef{&byte, 1});
      env.m().Abort("the test aborts");
      for (const RequestPtr& request : {on_shm, on_tcp, on_both}) {
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
  CHECK(absl::StartsWith(detected, LocalHostIdentity()));
  CHECK(absl::EndsWith(detected, absl::StrCat("/", NamespaceInode("net"))));
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
