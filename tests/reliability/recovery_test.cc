// Recovery after a rank dies: four forked ranks loop on an allreduce, rank 2 is SIGKILLed, and
// each survivor follows the documented path (docs/reliability.md): read the dead rank from the
// error (ErrorPeerRank), Abort the broken communicator, and create "world/1" through the same
// store and device with the survivors renumbered 0..2 in their old order; collectives on it
// must then give exact results.
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "tests/harness/multirank.h"
#include "tests/reliability/rank_comm.h"
#include "tests/reliability/shared_slots.h"
#include "tests/reliability/survivors.h"
#include "tests/reliability/timing_summary.h"

namespace chorus::testing {
namespace {

constexpr int kRanks = 4;
constexpr int kVictim = 2;
constexpr int kWarmupCalls = 3;
constexpr size_t kCount = 1 << 14;

// Slots: calls completed on the first communicator; seconds from the failure to the first
// correct allreduce on the new one (ns).
size_t Completed(int rank) { return rank; }
size_t Recovered(int rank) { return kRanks + rank; }

// Runs an allreduce, an allgather and a barrier on the survivors' communicator and checks
// every element.
absl::Status CheckSurvivors(Communicator& comm) {
  const int size = comm.size();
  std::vector<int32_t> data(kCount);
  for (size_t i = 0; i < kCount; ++i) data[i] = static_cast<int32_t>(i) * (comm.rank() + 1);
  CHORUS_RETURN_IF_ERROR(
      comm.AllReduce(data.data(), data.data(), kCount, DataType::kInt32, ReduceOp::kSum));
  const int32_t factor = size * (size + 1) / 2;
  for (size_t i = 0; i < kCount; ++i) {
    if (data[i] != static_cast<int32_t>(i) * factor) {
      return InternalError(absl::StrCat("allreduce element ", i, " is ", data[i]));
    }
  }
  const int32_t mine = comm.rank();
  std::vector<int32_t> ranks(size, -1);
  CHORUS_RETURN_IF_ERROR(comm.AllGather(&mine, ranks.data(), 1, DataType::kInt32));
  std::vector<int32_t> expected(size);
  std::iota(expected.begin(), expected.end(), 0);
  if (ranks != expected) return InternalError("allgather of the new ranks is wrong");
  return comm.Barrier();
}

TEST_CASE("survivors of a SIGKILL abort, regroup through the store and go on") {
  TempDir dir;
  SharedSlots slots(2 * kRanks);
  RankProcesses processes(kRanks, [&](int rank) -> absl::Status {
    CHORUS_ASSIGN_OR_RETURN(RankComm world, JoinOverFileStore(dir.path(), "world/0", rank, kRanks,
                                                              CommunicatorOptions{}));
    std::vector<float> data(kCount, 1.0f);
    absl::Status status;
    for (int64_t i = 0; status.ok(); ++i) {  // bounded by the harness's timeout
      status = world.comm->AllReduce(data.data(), data.data(), kCount, DataType::kFloat32,
                                     ReduceOp::kMax);
      if (status.ok()) slots[Completed(rank)].store(i + 1);
    }
    const int64_t failed = MonotonicNanos();
    const int dead = ErrorPeerRank(status).value_or(-1);
    if (dead != kVictim) return InternalError("the error names no dead rank: " + status.ToString());
    world.comm->Abort(absl::StrCat("rank ", dead, " died"));
    world.comm.reset();
    const int new_rank = rank < dead ? rank : rank - 1;
    CHORUS_ASSIGN_OR_RETURN(
        std::unique_ptr<Communicator> survivors,
        Communicator::Create(*world.store, "world/1", *world.device, new_rank, kRanks - 1));
    CHORUS_RETURN_IF_ERROR(CheckSurvivors(*survivors));
    slots[Recovered(rank)].store(MonotonicNanos() - failed);
    return absl::OkStatus();
  });
  REQUIRE(slots.AwaitAtLeast(Completed(0), kRanks, kWarmupCalls, absl::Seconds(60)));
  processes.Signal(kVictim, SIGKILL);
  std::vector<double> recovered_seconds;
  const absl::StatusOr<std::vector<int>> survivors =
      Survivors(processes.Wait(absl::Seconds(60)), kVictim);
  INFO(survivors.status().ToString());
  REQUIRE(survivors.ok());
  for (int rank : *survivors) recovered_seconds.push_back(slots[Recovered(rank)].load() / 1e9);
  WARN("from the failure to the first checked collectives of world/1: "
       << SummarizeSeconds(recovered_seconds));
}

}  // namespace
}  // namespace chorus::testing
