#include "chorus/transport/spin_policy.h"

#include <chrono>
#include <thread>
#include <vector>

#include "catch2/catch.hpp"
#include "chorus/transport/poll_window.h"

namespace chorus::testing {
namespace {

constexpr absl::Duration kBudget = absl::Microseconds(50);

// Runs one wait: takes the plan and reports how it ended. Returns the plan.
SpinPolicy::Plan Wait(SpinPolicy& policy, bool done_while_polling) {
  const SpinPolicy::Plan plan = policy.Next();
  policy.Record(plan, done_while_polling);
  return plan;
}

TEST_CASE("waits whose polls pay off keep polling for the whole budget") {
  SpinPolicy policy(kBudget);
  for (int i = 0; i < 1000; ++i) {
    const SpinPolicy::Plan plan = Wait(policy, /*done_while_polling=*/true);
    REQUIRE(plan.full);
    REQUIRE(plan.spin == kBudget);
  }
  CHECK(policy.polling());
}

TEST_CASE("waits whose polls never pay off stop polling, except for probes") {
  SpinPolicy policy(kBudget);
  // Each full poll that ends in sleep costs one point of the optimistic start.
  int full = 0;
  for (int i = 0; i < SpinPolicy::kMaxScore; ++i) full += Wait(policy, false).full;
  CHECK(full == SpinPolicy::kMaxScore);
  CHECK_FALSE(policy.polling());
  // From now on only every kProbeInterval-th wait polls.
  full = 0;
  const int waits = 10 * static_cast<int>(SpinPolicy::kProbeInterval);
  for (int i = 0; i < waits; ++i) {
    const SpinPolicy::Plan plan = Wait(policy, false);
    full += plan.full;
    if (!plan.full) CHECK(plan.spin == absl::ZeroDuration());
  }
  CHECK(full == 10);
}

TEST_CASE("a probe that pays off brings polling back") {
  SpinPolicy policy(kBudget);
  while (policy.polling()) Wait(policy, false);
  SpinPolicy::Plan plan = policy.Next();
  while (!plan.full) {
    policy.Record(plan, false);
    plan = policy.Next();
  }
  policy.Record(plan, /*done_while_polling=*/true);
  CHECK(policy.polling());
  CHECK(policy.Next().full);
}

TEST_CASE("polling goes on while one full poll in four ends in time, not one in ten") {
  // kHitCredit points per hit against one per miss: a hit in every fifth poll holds the score.
  SpinPolicy policy(kBudget);
  for (int i = 0; i < 1000; ++i) Wait(policy, i % SpinPolicy::kHitCredit == 0);
  CHECK(policy.polling());
  SpinPolicy rarely(kBudget);
  for (int i = 0; i < 1000; ++i) Wait(rarely, i % 10 == 0);
  CHECK_FALSE(rarely.polling());
}

TEST_CASE("a zero budget never polls and learns nothing") {
  SpinPolicy policy(absl::ZeroDuration());
  for (int i = 0; i < 100; ++i) CHECK(Wait(policy, false).spin == absl::ZeroDuration());
  CHECK(policy.polling());
}

TEST_CASE("threads waiting at once share one policy") {
  SpinPolicy policy(kBudget);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&policy] {
      for (int i = 0; i < 10000; ++i) Wait(policy, false);
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK_FALSE(policy.polling());
  for (int i = 0; i < 100; ++i) Wait(policy, true);
  CHECK(policy.polling());
}

// PollWindow: only the waiter's own polling spends the budget; time other threads ran while it
// had yielded the core does not, up to kMostStretch times the budget. Sleeps stand in for
// polling, with margins far beyond a sleep's usual overshoot.
TEST_CASE("a poll window closes once its budget is spent") {
  PollWindow window(absl::Milliseconds(200));
  CHECK(window.open());
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  CHECK_FALSE(window.open());
  CHECK_FALSE(PollWindow(absl::ZeroDuration()).open());
}

TEST_CASE("time other threads ran during a yield does not spend a poll window") {
  PollWindow window(absl::Milliseconds(20));
  window.Away(std::chrono::milliseconds(300));  // others held the core this long
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  CHECK(window.open());  // 40 ms after the start, past the 20 ms budget
  window.Away(std::chrono::seconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  CHECK_FALSE(window.open());  // never past 20 x 20 ms after the start
}

TEST_CASE("a yield that returns at once leaves a poll window where it was") {
  // 20000 quick yields would add 60 ms if they counted, keeping the window open past 40 ms.
  PollWindow window(absl::Milliseconds(20));
  for (int i = 0; i < 20000; ++i) window.Away(PollWindow::kOthersRan);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  CHECK_FALSE(window.open());
}

TEST_CASE("a poll window that has closed stays closed however long its yields take") {
  PollWindow window(absl::Milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE_FALSE(window.open());
  for (int i = 0; i < 3; ++i) window.Yield();
  CHECK_FALSE(window.open());
}

}  // namespace
}  // namespace chorus::testing
