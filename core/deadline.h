// A point on the monotonic clock by which a blocking call must return. Every blocking call in
// Chorus takes one; "no deadline" is spelled Deadline::Infinite() so it is always a choice.
#ifndef CHORUS_CORE_DEADLINE_H_
#define CHORUS_CORE_DEADLINE_H_

#include <chrono>
#include <string>

#include "absl/time/time.h"

namespace chorus {

// Copyable value type; thread-compatible.
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline Infinite() { return Deadline(Clock::time_point::max()); }
  static Deadline After(absl::Duration timeout) {
    if (timeout == absl::InfiniteDuration()) return Infinite();
    if (timeout < absl::ZeroDuration()) timeout = absl::ZeroDuration();
    return Deadline(Clock::now() + absl::ToChronoNanoseconds(timeout));
  }
  static Deadline AfterMillis(int64_t ms) { return After(absl::Milliseconds(ms)); }
  // A point already read from the clock (so one read can serve several deadlines).
  static Deadline At(Clock::time_point when) { return Deadline(when); }

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

}  // namespace chorus

#endif  // CHORUS_CORE_DEADLINE_H_
