// Recovery after ranks die: six forked ranks loop on an allreduce, two of them are SIGKILLed
// mid-loop, and the four survivors Shrink the broken communicator to themselves and finish the
// loop with exact results, over TCP, shared memory and the hybrid transport. Also: survivors
// that disagree on whom to exclude fail with a mismatch; a survivor that dies instead of
// shrinking is named at once, one that lives on without shrinking at the connect timeout.
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "chorus/core/status.h"
#include "tests/harness/multirank.h"
#include "tests/reliability/rank_comm.h"
#include "tests/reliability/shared_slots.h"
#include "tests/reliability/timing_summary.h"

namespace chorus::testing {
namespace {

constexpr int kRanks = 6;
const std::vector<int> kVictims = {1, 4};
// Every rank runs the loop until the victims are killed: a survivor that reached a fixed
// count first would never see the failure. The bound only ends a loop the kill never reaches.
constexpr int64_t kMostCalls = 10'000'000;
constexpr int64_t kCallsAfterShrink = 400;  // iterations the survivors run on the shrunk world
constexpr int64_t kWarmupCalls = 5;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int64_t kShrinkBoundNs = 3'000'000'000;  // the sanitizers slow the bootstrap
#else
constexpr int64_t kShrinkBoundNs = 1'000'000'000;
#endif

bool IsVictim(int rank) {
  return std::find(kVictims.begin(), kVictims.end(), rank) != kVictims.end();
}

// Slots: iterations completed; nanoseconds from noticing the failure to the shrunk
// communicator's first allreduce (which agrees where to resume).
size_t Completed(int rank) { return rank; }
size_t Recovered(int rank) { return kRanks + rank; }

// Iteration i's allreduce: rank r contributes (r + 1) * (i + 1); the sum over `ranks` checks it.
absl::Status LoopStep(Communicator& comm, int original_rank, const std::vector<int>& ranks,
                      int64_t i) {
  int64_t value = (original_rank + 1) * (i + 1);
  CHORUS_RETURN_IF_ERROR(comm.AllReduce(&value, &value, 1, DataType::kInt64, ReduceOp::kSum));
  int64_t expected = 0;
  for (int r : ranks) expected += (r + 1) * (i + 1);
  if (value != expected) {
    return InternalError(
        absl::StrCat(comm.name(), " iteration ", i, ": ", value, " != ", expected));
  }
  return absl::OkStatus();
}

void KillTwoAndShrink(TransportKind transport) {
  TempDir dir;
  SharedSlots slots(2 * kRanks);
  RankProcesses processes(kRanks, [&](int rank) -> absl::Status {
    CHORUS_ASSIGN_OR_RETURN(RankComm world, JoinOverFileStore(dir.path(), "world", rank, kRanks,
                                                              CommunicatorOptions{}, transport));
    std::vector<int> everyone(kRanks);
    std::iota(everyone.begin(), everyone.end(), 0);
    int64_t i = 0;
    absl::Status status;
    for (; i < kMostCalls; ++i) {
      status = LoopStep(*world.comm, rank, everyone, i);
      if (!status.ok()) break;
      slots[Completed(rank)].store(i + 1);
    }
    if (status.ok()) return InternalError("the loop ended without a failure");
    if (IsVictim(rank)) {
      // The victims are killed one after the other: the second may see the first die before
      // its own SIGKILL lands. It stands for a rank that dies with the first, so it waits.
      absl::SleepFor(absl::Seconds(60));
      return InternalError("a victim outlived its SIGKILL: " + status.ToString());
    }
    const int64_t noticed = MonotonicNanos();
    if (GetErrorKind(status) != ErrorKind::kPeerUnavailable || !ErrorPeerRank(status) ||
        !IsVictim(*ErrorPeerRank(status))) {
      return InternalError("the failure names no dead rank: " + status.ToString());
    }
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> survivors, world.comm->Shrink(kVictims));
    std::vector<int> alive;
    for (int r : everyone) {
      if (!IsVictim(r)) alive.push_back(r);
    }
    // A survivor whose part of an allreduce did not involve a dead rank may have completed
    // it while others failed it: resume from the earliest failed iteration.
    int64_t resume = i;
    CHORUS_RETURN_IF_ERROR(
        survivors->AllReduce(&resume, &resume, 1, DataType::kInt64, ReduceOp::kMin));
    slots[Recovered(rank)].store(MonotonicNanos() - noticed);
    for (i = resume; i < resume + kCallsAfterShrink; ++i) {
      CHORUS_RETURN_IF_ERROR(LoopStep(*survivors, rank, alive, i));
    }
    return absl::OkStatus();
  });
  REQUIRE(slots.AwaitAtLeast(Completed(0), kRanks, kWarmupCalls, absl::Seconds(60)));
  for (int victim : kVictims) processes.Signal(victim, SIGKILL);
  std::vector<double> recovered_seconds;
  for (const ProcessOutcome& outcome : processes.Wait(absl::Seconds(60))) {
    INFO(outcome.Describe());
    if (IsVictim(outcome.rank)) {
      CHECK(outcome.term_signal == SIGKILL);
      continue;
    }
    CHECK(outcome.ok());
    const int64_t took = slots[Recovered(outcome.rank)].load();
    CHECK(took > 0);
    CHECK(took < kShrinkBoundNs);
    recovered_seconds.push_back(took / 1e9);
  }
  WARN(TransportName(transport) << ": from noticing the failure to the shrunk communicator's "
                                   "first allreduce: "
                                << SummarizeSeconds(recovered_seconds));
}

TEST_CASE("two of six ranks SIGKILLed mid-loop: the survivors shrink and finish it") {
  for (TransportKind transport :
       {TransportKind::kTcp, TransportKind::kShm, TransportKind::kHybrid}) {
    DYNAMIC_SECTION(TransportName(transport)) { KillTwoAndShrink(transport); }
  }
}

TEST_CASE("survivors that exclude different ranks fail with a mismatch naming the other") {
  TempDir dir;
  const std::vector<ProcessOutcome> outcomes = RunRanksAsProcesses(
      4,
      [&](int rank) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(
            RankComm world, JoinOverFileStore(dir.path(), "world", rank, 4, CommunicatorOptions{}));
        // Ranks 0 and 1 exclude rank 3; ranks 2 and 3 exclude rank 0.
        const std::vector<int> excluded = rank < 2 ? std::vector<int>{3} : std::vector<int>{0};
        const absl::Status status = world.comm->Shrink(excluded).status();
        if (GetErrorKind(status) != ErrorKind::kMismatch) {
          return InternalError("expected a mismatch: " + status.ToString());
        }
        const int other = rank < 2 ? 2 : 1;
        if (ErrorPeerRank(status) != other ||
            !absl::StrContains(status.message(), absl::StrCat("rank ", other, " excludes"))) {
          return InternalError("the mismatch names the wrong rank: " + status.ToString());
        }
        return absl::OkStatus();
      },
      absl::Seconds(60));
  for (const ProcessOutcome& outcome : outcomes) {
    INFO(outcome.Describe());
    CHECK(outcome.ok());
  }
}

// Runs `survivor` on ranks 0 and 1 and `other` on rank 2 of a three-rank communicator.
void RunThree(const CommunicatorOptions& options,
              const std::function<absl::Status(Communicator&)>& survivor,
              const std::function<absl::Status(Communicator&)>& other) {
  TempDir dir;
  const std::vector<ProcessOutcome> outcomes = RunRanksAsProcesses(
      3,
      [&](int rank) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(RankComm world,
                                JoinOverFileStore(dir.path(), "world", rank, 3, options));
        return rank == 2 ? other(*world.comm) : survivor(*world.comm);
      },
      absl::Seconds(60));
  for (const ProcessOutcome& outcome : outcomes) {
    INFO(outcome.Describe());
    CHECK(outcome.ok());
  }
}

TEST_CASE("a survivor that dies instead of shrinking is named at once") {
  RunThree(
      CommunicatorOptions{},  // a 30 s connect timeout, which the others must not wait out
      [](Communicator& comm) -> absl::Status {
        const int64_t start = MonotonicNanos();
        const absl::Status status = comm.Shrink({}).status();
        const int64_t took = MonotonicNanos() - start;
        if (GetErrorKind(status) != ErrorKind::kPeerUnavailable || ErrorPeerRank(status) != 2 ||
            !absl::StrContains(status.message(), "rank 2 has gone")) {
          return InternalError("expected rank 2 named as gone: " + status.ToString());
        }
        if (took > kShrinkBoundNs) return InternalError("noticed late: " + status.ToString());
        return absl::OkStatus();
      },
      [](Communicator&) -> absl::Status {
        syscall(SYS_exit_group, 0);  // dies, leaving nothing in order
        return absl::OkStatus();
      });
}

TEST_CASE("a survivor that lives on without shrinking is named at the connect timeout") {
  CommunicatorOptions options;
  options.connect_timeout = absl::Seconds(1);
  RunThree(
      options,
      [](Communicator& comm) -> absl::Status {
        const absl::Status status = comm.Shrink({}).status();
        if (GetErrorKind(status) != ErrorKind::kDeadlineExceeded || ErrorPeerRank(status) != 2 ||
            !absl::StrContains(status.message(), "ranks [2] did not call Shrink")) {
          return InternalError("expected rank 2 named at the deadline: " + status.ToString());
        }
        return absl::OkStatus();
      },
      [](Communicator&) -> absl::Status {
        std::this_thread::sleep_for(std::chrono::seconds(3));
        return absl::OkStatus();
      });
}

}  // namespace
}  // namespace chorus::testing
