// How long one wait polls before it sleeps, counted in the waiter's own polling: a waiter that
// yields its core (sched_yield) while ranks outnumber cores gets it back only after other
// threads ran, and that time is theirs, not its polling. Without this, an oversubscribed rank's
// budget runs out while the rank it waits for holds the core, every wait ends in a sleep and a
// wake-up, and polling stops paying just where the wake-ups cost most.
#ifndef CHORUS_TRANSPORT_POLL_WINDOW_H_
#define CHORUS_TRANSPORT_POLL_WINDOW_H_

#include <sched.h>

#include <algorithm>
#include <chrono>

#include "absl/time/time.h"

namespace chorus {

// A wait longer than this (several small messages' flight, many cache-line handoffs) yields the
// core at every look at the clock, even where each rank has a core of its own: the rank it waits
// for may share this core all the same. The scheduler starts ranks of one host wherever it
// likes, often two on one core for the first tens of milliseconds, or other work holds the
// other cores; a waiter that kept the core until it slept made each small collective cost
// 10-70 us instead of under 1.
inline constexpr std::chrono::microseconds kYieldAfterWaiting{2};

class PollWindow {
 public:
  using Clock = std::chrono::steady_clock;
  // A yield that returns later than this gave the core to another thread meanwhile.
  static constexpr std::chrono::microseconds kOthersRan{3};
  // The window never stretches past this many times its budget.
  static constexpr int kMostStretch = 20;

  explicit PollWindow(absl::Duration budget) : PollWindow(Clock::now(), budget) {}

  bool open() const { return Clock::now() < end_; }

  // Gives up the core for a moment; the window moves later by however long others then ran.
  // A window that has closed stays closed: its waiter sleeps from then on.
  void Yield() {
    const Clock::time_point before = Clock::now();
    sched_yield();
    if (before < end_) Away(Clock::now() - before);
  }

  // A yield begun while the window was open that took `away`: beyond kOthersRan, the window
  // moves later by it (at most to kMostStretch times the budget after the start).
  void Away(Clock::duration away) {
    if (away > kOthersRan) end_ = std::min(end_ + away, latest_);
  }

 private:
  PollWindow(Clock::time_point start, absl::Duration budget)
      : end_(start + absl::ToChronoNanoseconds(budget)),
        latest_(start + kMostStretch * absl::ToChronoNanoseconds(budget)) {}

  Clock::time_point end_;
  const Clock::time_point latest_;
};

}  // namespace chorus

#endif  // CHORUS_TRANSPORT_POLL_WINDOW_H_
