// A point on the monotonic clock by which a blocking call must return. Every blocking call in
// Chorus takes one; "no deadline" is spelled Deadline::Infinite() so it is always a choice.
#ifndef CHORUS_CORE_DEADLINE_H_
#define CHORUS_CORE_DEADLINE_H_

#include <time.h>

#include <chrono>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace chorus {

// Copyable value type; thread-compatible.
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline Infinite() { return Deadline(Clock::time_point::max()); }
  static Deadline After(absl::Duration timeout) { return AfterFrom(Clock::now(), timeout); }
  // `timeout` after `now`, a point already read from the clock.
  static Deadline AfterFrom(Clock::time_point now, absl::Duration timeout) {
    if (timeout == absl::InfiniteDuration()) return Infinite();
    if (timeout < absl::ZeroDuration()) timeout = absl::ZeroDuration();
    return Deadline(now + absl::ToChronoNanoseconds(timeout));
  }
  static Deadline AfterMillis(int64_t ms) { return After(absl::Milliseconds(ms)); }
  // A point already read from the clock (so one read can serve several deadlines).
  static Deadline At(Clock::time_point when) { return Deadline(when); }

  // The monotonic clock as of the kernel's last tick: it trails Clock::now() by about
  // CoarseTick() at most (more while the kernel's tick is late), and costs a few nanoseconds to
  // read where Clock::now() costs about 20 on some virtual machines. Never ahead of
  // Clock::now().
  static Clock::time_point CoarseNow() {
    timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    return Clock::time_point(std::chrono::seconds(now.tv_sec) +
                             std::chrono::nanoseconds(now.tv_nsec));
  }
  // The step of CoarseNow(): the kernel's tick (1-10 ms).
  static Clock::duration CoarseTick() {
    static const Clock::duration tick = [] {
      timespec resolution;
      clock_getres(CLOCK_MONOTONIC_COARSE, &resolution);
      return Clock::duration(std::chrono::seconds(resolution.tv_sec) +
                             std::chrono::nanoseconds(resolution.tv_nsec));
    }();
    return tick;
  }

  bool IsInfinite() const { return when_ == Clock::time_point::max(); }
  bool Expired() const { return !IsInfinite() && Clock::now() >= when_; }

  // Time left, zero once expired, absl::InfiniteDuration() for Infinite().
  absl::Duration Remaining() const {
    if (IsInfinite()) return absl::InfiniteDuration();
    const auto left = when_ - Clock::now();
    if (left <= Clock::duration::zero()) return absl::ZeroDuration();
    return absl::FromChrono(left);
  }

  // Milliseconds left rounded up, capped at `cap_ms`; for poll()/epoll_wait() timeouts.
  int RemainingMillis(int cap_ms) const {
    const absl::Duration left = Remaining();
    if (left >= absl::Milliseconds(cap_ms)) return cap_ms;
    return static_cast<int>(absl::ToInt64Milliseconds(left + absl::Microseconds(999)));
  }

  // The earlier of the two.
  Deadline Min(const Deadline& other) const { return other.when_ < when_ ? other : *this; }

  Clock::time_point time_point() const { return when_; }

 private:
  explicit Deadline(Clock::time_point when) : when_(when) {}
  Clock::time_point when_;
};

// The wall-clock time of a steady-clock reading, where one is at hand: it saves a second clock
// read (about 20 ns) on paths that need both. It uses the offset between the two clocks when
// first called, so it drifts from absl::Now() only by what the wall clock is stepped or
// slewed later: right for timestamps in logs and dumps, not for comparing hosts' clocks.
inline absl::Time WallTimeOf(Deadline::Clock::time_point when) {
  static const absl::Time wall_at_zero =
      absl::Now() - absl::FromChrono(Deadline::Clock::now().time_since_epoch());
  return wall_at_zero + absl::FromChrono(when.time_since_epoch());
}

// Now, on WallTimeOf's scale: timestamps compared or subtracted with WallTimeOf's (durations in
// the flight recorder and the trace) come from here, never from absl::Now().
inline absl::Time WallNow() { return WallTimeOf(Deadline::Clock::now()); }

}  // namespace chorus

#endif  // CHORUS_CORE_DEADLINE_H_
