// The schedule of held announcements on its own: due order, holds queued per sender, the
// pull at once past half of a sender's slots, and the published time of the next pull.
#include <catch2/catch.hpp>

#include <mutex>
#include <vector>

#include "absl/time/time.h"
#include "chorus/transport/shm/hold_schedule.h"
#include "chorus/transport/shm/layout.h"

namespace chorus::shm {
namespace {

using Clock = HoldSchedule::Clock;
constexpr absl::Duration kHold = absl::Seconds(10);

// The arrivals due by `at`, in the order they are popped.
std::vector<uint64_t> PopAllDue(HoldSchedule& schedule, Clock::time_point at) {
  std::vector<uint64_t> arrivals;
  HoldSchedule::Entry entry;
  while (schedule.PopDue(at, &entry)) arrivals.push_back(entry.arrival);
  return arrivals;
}

TEST_CASE("an empty schedule has nothing due and no next pull") {
  std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  HoldSchedule schedule(mu, 4);
  CHECK(schedule.empty());
  CHECK(schedule.UntilNextPull() == absl::InfiniteDuration());
  CHECK(PopAllDue(schedule, Clock::now() + absl::ToChronoNanoseconds(kHold)).empty());
}

TEST_CASE("one sender's holds queue behind each other; other senders' run alongside") {
  std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  HoldSchedule schedule(mu, 4);
  const Clock::time_point start = Clock::now();
  schedule.Hold({1, 7, 100}, kHold, 1);
  schedule.Hold({1, 7, 101}, kHold, 2);  // due one hold after the first
  schedule.Hold({2, 7, 102}, kHold, 1);  // another sender: its own queue
  const absl::Duration until = schedule.UntilNextPull();
  CHECK(until > absl::ZeroDuration());
  CHECK(until <= kHold);

  CHECK(PopAllDue(schedule, start).empty());
  const auto one_and_a_half = start + absl::ToChronoNanoseconds(kHold * 1.5);
  CHECK(PopAllDue(schedule, one_and_a_half) == std::vector<uint64_t>{100, 102});
  CHECK_FALSE(schedule.empty());
  CHECK(schedule.UntilNextPull() > kHold / 2);
  const auto three = start + absl::ToChronoNanoseconds(kHold * 3);
  CHECK(PopAllDue(schedule, three) == std::vector<uint64_t>{101});
  CHECK(schedule.empty());
  CHECK(schedule.UntilNextPull() == absl::InfiniteDuration());
}

TEST_CASE("past half of a sender's slots unclaimed, a message is due at once") {
  std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  HoldSchedule schedule(mu, 2);
  schedule.Hold({1, 7, 200}, kHold, 1);
  schedule.Hold({1, 7, 201}, kHold, kSlotsPerPeer / 2 + 1);
  CHECK(schedule.UntilNextPull() == absl::ZeroDuration());
  CHECK(PopAllDue(schedule, Clock::now()) == std::vector<uint64_t>{201});
  // It took no place in the sender's queue: the next one is due one hold after the first.
  const Clock::time_point start = Clock::now();
  schedule.Hold({1, 7, 202}, kHold, 2);
  CHECK(PopAllDue(schedule, start + absl::ToChronoNanoseconds(kHold * 1.5)) ==
        std::vector<uint64_t>{200});
  CHECK(PopAllDue(schedule, start + absl::ToChronoNanoseconds(kHold * 3)) ==
        std::vector<uint64_t>{202});
}

TEST_CASE("clearing the schedule drops its entries and its next pull") {
  std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  HoldSchedule schedule(mu, 2);
  schedule.Hold({1, 7, 300}, kHold, 1);
  CHECK(schedule.UntilNextPull() != absl::InfiniteDuration());
  schedule.Clear();
  CHECK(schedule.empty());
  CHECK(schedule.UntilNextPull() == absl::InfiniteDuration());
  CHECK(PopAllDue(schedule, Clock::now() + absl::ToChronoNanoseconds(kHold * 2)).empty());
}

}  // namespace
}  // namespace chorus::shm
