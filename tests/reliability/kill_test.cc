// SIGKILL one rank of four (forked processes, a FileStore rendezvous) while every rank loops on
// one collective forced to one algorithm: every survivor's call must fail within 1 s of the
// kill, measured from the kill itself, with an error naming the dead rank. Over TCP, over shared
// memory (the dead rank may die holding or waiting on a segment) and over the hybrid transport
// (two hosts of two ranks: shm inside each, TCP between); afterwards no segment of the dead
// rank is left in /dev/shm.
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "tests/harness/multirank.h"
#include "tests/reliability/fault_case.h"
#include "tests/reliability/rank_comm.h"
#include "tests/reliability/shared_slots.h"
#include "tests/reliability/survivors.h"
#include "tests/reliability/timing_summary.h"
#include "tests/shm/shm_test_util.h"

namespace chorus::testing {
namespace {

constexpr int kRanks = 4;
constexpr int kVictim = 2;          // not the broadcast root: the root's death is no different
constexpr size_t kCount = 1 << 16;  // 256 KiB: a kill lands mid-transfer, not between calls
constexpr int kWarmupCalls = 3;
constexpr double kBoundSeconds = 1.0;

// Slots: calls completed by each rank, then the time each rank's failing call returned.
size_t Completed(int rank) { return rank; }
size_t FailedAt(int rank) { return kRanks + rank; }

void KillMidCollective(TransportKind transport, const FaultCase& fault_case,
                       std::vector<double>* latencies) {
  INFO(fault_case.Name() << " over " << TransportName(transport));
  TempDir dir;
  SharedSlots slots(2 * kRanks);
  RankProcesses processes(kRanks, [&](int rank) -> absl::Status {
    CommunicatorOptions options;
    options.timeout = absl::Seconds(30);  // far beyond the bound: only the death may end a call
    CHORUS_ASSIGN_OR_RETURN(
        RankComm world, JoinOverFileStore(dir.path(), "kill", rank, kRanks, options, transport));
    FaultCall call(fault_case, kRanks, kCount);
    absl::Status status;
    for (int64_t i = 0; status.ok(); ++i) {  // bounded by the harness's timeout
      status = call.Run(*world.comm, options.timeout);
      if (status.ok()) slots[Completed(rank)].store(i + 1);
    }
    slots[FailedAt(rank)].store(MonotonicNanos());
    std::fprintf(stderr, "%s rank %d: %s\n", fault_case.Name().c_str(), rank,
                 status.ToString().c_str());
    // Also the survivors that learn of the death from another rank's published failure.
    if (!ErrorNamesRank(status, kVictim)) {
      return InternalError("the error does not name the dead rank: " + status.ToString());
    }
    return absl::OkStatus();
  });
  REQUIRE(slots.AwaitAtLeast(Completed(0), kRanks, kWarmupCalls, absl::Seconds(60)));
  const int64_t killed = MonotonicNanos();
  processes.Signal(kVictim, SIGKILL);
  const absl::StatusOr<std::vector<int>> survivors =
      Survivors(processes.Wait(absl::Seconds(30)), kVictim);
  INFO(survivors.status().ToString());
  REQUIRE(survivors.ok());
  for (int rank : *survivors) {
    const double latency = (slots[FailedAt(rank)].load() - killed) / 1e9;
    INFO("failed " << latency << " s after the kill");
    CHECK(latency < kBoundSeconds);
    latencies->push_back(latency);
  }
}

void KillDuringEveryCase(TransportKind transport) {
  for (const FaultCase& fault_case : FaultCases()) {
    std::vector<double> latencies;
    KillMidCollective(transport, fault_case, &latencies);
    WARN("SIGKILL during " << fault_case.Name() << " over " << TransportName(transport)
                           << ": survivors failed " << SummarizeSeconds(latencies)
                           << " after the kill");
  }
  // Segments are memfds, which never have a name there; this holds the transport to that.
  const std::vector<std::string> left = shm_testing::ChorusShmFiles();
  INFO("left in /dev/shm: " << left.size());
  CHECK(left.empty());
}

TEST_CASE("SIGKILL during every collective x algorithm over TCP") {
  KillDuringEveryCase(TransportKind::kTcp);
}

TEST_CASE("SIGKILL during every collective x algorithm over shared memory") {
  KillDuringEveryCase(TransportKind::kShm);
}

TEST_CASE("SIGKILL during every collective x algorithm over the hybrid transport") {
  KillDuringEveryCase(TransportKind::kHybrid);
}

}  // namespace
}  // namespace chorus::testing
