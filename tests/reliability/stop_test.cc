// SIGSTOP one rank of four (forked processes over TCP, a FileStore rendezvous) while every rank
// loops on one collective forced to one algorithm with a 1 s deadline: every survivor's call must
// fail at its deadline (within deadline + 10 %) with DeadlineExceeded naming the collective, its
// sequence number and a rank it did not hear from.
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "tests/harness/multirank.h"
#include "tests/reliability/fault_case.h"
#include "tests/reliability/rank_comm.h"
#include "tests/reliability/shared_slots.h"
#include "tests/reliability/survivors.h"
#include "tests/reliability/timing_summary.h"

namespace chorus::testing {
namespace {

constexpr int kRanks = 4;
constexpr int kVictim = 2;  // not the broadcast root
constexpr size_t kCount = 1 << 16;
constexpr int kWarmupCalls = 3;
const absl::Duration kDeadline = absl::Seconds(1);
// The warm-up calls connect the ranks, which start one by one and under a sanitizer may enter
// the first calls seconds apart: they get a deadline of their own. Only later calls are
// stopped, and those are checked against kDeadline.
const absl::Duration kWarmupDeadline = absl::Seconds(30);
const absl::Duration kBound = kDeadline * 1.1;

// Slots: calls completed by each rank; how long its failing call took (ns); the rank its error
// names (+1, so 0 means none); whether it has finished checking its error.
size_t Completed(int rank) { return rank; }
size_t Took(int rank) { return kRanks + rank; }
size_t Named(int rank) { return 2 * kRanks + rank; }
size_t Checked(int rank) { return 3 * kRanks + rank; }

absl::Status CheckTimeout(const FaultCase& fault_case, int64_t sequence, const absl::Status& status,
                          absl::Duration took) {
  const std::string what = absl::StrCat(status.ToString(), " after ", absl::FormatDuration(took));
  if (GetErrorKind(status) != ErrorKind::kDeadlineExceeded) {
    return InternalError("expected DeadlineExceeded, got " + what);
  }
  if (took < kDeadline || took > kBound)
    return InternalError("timed out at the wrong time: " + what);
  const std::string call = absl::StrCat(CollectiveKindName(fault_case.kind), " #", sequence);
  if (!absl::StrContains(status.message(), call)) {
    return InternalError(absl::StrCat("the error does not name ", call, ": ", what));
  }
  if (!ErrorPeerRank(status).has_value()) return InternalError("no silent rank named: " + what);
  return absl::OkStatus();
}

void StopMidCollective(const FaultCase& fault_case, std::vector<double>* took_seconds) {
  INFO(fault_case.Name());
  TempDir dir;
  SharedSlots slots(4 * kRanks);
  RankProcesses processes(kRanks, [&](int rank) -> absl::Status {
    CommunicatorOptions options;
    options.timeout = kDeadline;
    CHORUS_ASSIGN_OR_RETURN(RankComm world,
                            JoinOverFileStore(dir.path(), "stop", rank, kRanks, options));
    FaultCall call(fault_case, kRanks, kCount);
    absl::Status status;
    int64_t sequence = 0;
    int64_t started = 0;
    for (; status.ok(); ++sequence) {  // bounded by the harness's timeout
      started = MonotonicNanos();
      status = call.Run(*world.comm, sequence < kWarmupCalls ? kWarmupDeadline : kDeadline);
      if (status.ok()) slots[Completed(rank)].store(sequence + 1);
    }
    const absl::Duration took = absl::Nanoseconds(MonotonicNanos() - started);
    slots[Took(rank)].store(absl::ToInt64Nanoseconds(took));
    slots[Named(rank)].store(ErrorPeerRank(status).value_or(-1) + 1);
    std::fprintf(stderr, "%s rank %d after %s: %s\n", fault_case.Name().c_str(), rank,
                 absl::FormatDuration(took).c_str(), status.ToString().c_str());
    const absl::Status checked = CheckTimeout(fault_case, sequence - 1, status, took);
    // Stay connected until every survivor has timed out: a survivor that exits early turns the
    // others' timeouts into "connection closed".
    slots[Checked(rank)].store(1);
    slots.AwaitAtLeast(Checked(0), kVictim, 1, absl::Seconds(20));
    slots.AwaitAtLeast(Checked(kVictim + 1), kRanks - kVictim - 1, 1, absl::Seconds(20));
    return checked;
  });
  REQUIRE(slots.AwaitAtLeast(Completed(0), kRanks, kWarmupCalls, absl::Seconds(60)));
  processes.Signal(kVictim, SIGSTOP);
  slots.AwaitAtLeast(Checked(0), kVictim, 1, absl::Seconds(30));
  slots.AwaitAtLeast(Checked(kVictim + 1), kRanks - kVictim - 1, 1, absl::Seconds(30));
  processes.Signal(kVictim, SIGKILL);
  bool victim_named = false;
  const absl::StatusOr<std::vector<int>> survivors =
      Survivors(processes.Wait(absl::Seconds(30)), kVictim);
  INFO(survivors.status().ToString());
  REQUIRE(survivors.ok());
  for (int rank : *survivors) {
    took_seconds->push_back(slots[Took(rank)].load() / 1e9);
    victim_named = victim_named || slots[Named(rank)].load() == kVictim + 1;
  }
  // Survivors waiting on another survivor name that one; someone must name the stopped rank.
  CHECK(victim_named);
}

TEST_CASE("SIGSTOP during every collective x algorithm") {
  for (const FaultCase& fault_case : FaultCases()) {
    std::vector<double> took_seconds;
    StopMidCollective(fault_case, &took_seconds);
    WARN("SIGSTOP during " << fault_case.Name() << " (deadline 1 s): survivors failed after "
                           << SummarizeSeconds(took_seconds));
  }
}

}  // namespace
}  // namespace chorus::testing
