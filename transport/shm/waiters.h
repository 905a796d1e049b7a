// How threads wait for requests of one shm mesh, and how they are woken.
//
// A waiting thread makes progress itself: it polls for a while (a message usually arrives
// within microseconds, and a futex wake-up costs tens), yielding the core now and then, and
// then sleeps on this rank's inbox doorbell, which peers ring when they publish and local
// threads when they complete something. Owns the counts of threads waiting and asleep, the
// flag that something completed since the last wake-up, the spin and yield policy, and the
// pairing that keeps a completion from being missed by a thread going to sleep.
//
// Thread-safe: lock-free, for any thread.
#ifndef CHORUS_TRANSPORT_SHM_WAITERS_H_
#define CHORUS_TRANSPORT_SHM_WAITERS_H_

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "chorus/core/deadline.h"
#include "chorus/transport/poll_window.h"
#include "chorus/transport/shm/doorbell.h"
#include "chorus/transport/shm/layout.h"
#include "chorus/transport/shm/segment.h"
#include "chorus/transport/spin_policy.h"

namespace chorus::shm {

class Waiters {
 public:
  // `doorbell`: this rank's inbox header; `spin`: the budget of a waiter's poll before it
  // sleeps (ShmOptions::spin; the spin policy decides how much of it a wait uses);
  // `addresses`: the mesh's ranks, to tell whether this host's ranks
  // outnumber the cores this process may run on.
  Waiters(InboxHeader& doorbell, absl::Duration spin, const std::vector<InboxAddress>& addresses);

  // Waits until `done()` or `deadline`, calling `poll()` to make progress: spinning first,
  // then asleep on the doorbell, for at most `wake_by()` at a time (the time to the caller's
  // next timed work).
  template <typename Poll, typename Done, typename WakeBy>
  void Wait(Deadline deadline, Poll&& poll, Done&& done, WakeBy&& wake_by);

  // Whether any thread is inside Wait (and so makes progress).
  bool active() const { return active_.load(std::memory_order_relaxed) > 0; }
  // Whether a spinning waiter yields the core at every poll (this host's ranks outnumber the
  // cores this process may run on).
  bool yields_every_poll() const { return yield_every_ == 1; }
  // Something completed: WakeIfCompleted wakes the threads asleep in Wait.
  void Completed() { completed_since_wake_.store(true, std::memory_order_release); }
  void WakeIfCompleted();

 private:
  // A sleeping waiter re-checks at least this often (its deadline, and as a safety net).
  static constexpr absl::Duration kSleepCap = absl::Milliseconds(100);
  // A spinning waiter reads the clock (for the end of its spin and its deadline) once per this
  // many polls: a clock read costs about as much as a poll of an idle ring.
  static constexpr int kPollsPerClockRead = 16;
  InboxHeader& doorbell_;
  SpinPolicy spin_policy_;
  // A spinning waiter yields the core every this many polls: at every poll when this host's
  // ranks outnumber the cores this process may run on, so the rank it waits for gets to run;
  // rarely otherwise, where a yield only adds a system call to the reply's latency.
  const int yield_every_;
  std::atomic<int> active_{0};    // threads inside Wait()
  std::atomic<int> sleeping_{0};  // of those, the ones asleep on the doorbell
  std::atomic<bool> completed_since_wake_{false};
};

template <typename Poll, typename Done, typename WakeBy>
void Waiters::Wait(Deadline deadline, Poll&& poll, Done&& done, WakeBy&& wake_by) {
  active_.fetch_add(1, std::memory_order_relaxed);
  const SpinPolicy::Plan plan = spin_policy_.Next();
  // The spin is timed from the first clock read, kPollsPerClockRead polls in.
  const auto spin = absl::ToChronoNanoseconds(plan.spin);
  std::chrono::steady_clock::time_point first_read{};
  for (int polls = 1; !done(); ++polls) {
    poll();
    if (done()) break;
    bool yield = polls % yield_every_ == 0;
    if (polls % kPollsPerClockRead == 0) {
      const auto now = std::chrono::steady_clock::now();
      if (polls == kPollsPerClockRead) first_read = now;
      const auto waited = now - first_read;
      if (polls > kPollsPerClockRead && waited >= spin) break;
      if (now >= deadline.time_point()) break;
      yield = yield || waited >= kYieldAfterWaiting;  // whatever yield_every_ says
    }
    if (yield) sched_yield();
  }
  spin_policy_.Record(plan, done());
  while (!done() && !deadline.Expired()) {
    const uint32_t seq = BeginSleep(doorbell_);
    sleeping_.fetch_add(1, std::memory_order_seq_cst);
    poll();
    if (!done()) Sleep(doorbell_, seq, std::min({deadline.Remaining(), kSleepCap, wake_by()}));
    sleeping_.fetch_sub(1, std::memory_order_relaxed);
    EndSleep(doorbell_);
    poll();
  }
  active_.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace chorus::shm

#endif  // CHORUS_TRANSPORT_SHM_WAITERS_H_
