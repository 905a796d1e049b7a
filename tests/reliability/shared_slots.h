// Counters and timestamps shared between a test process and the ranks it forks: an anonymous
// MAP_SHARED mapping made before the fork, so the parent can see how far each rank got and when it
// failed, on one clock (steady_clock is CLOCK_MONOTONIC, the same in every process).
#ifndef CHORUS_TESTS_RELIABILITY_SHARED_SLOTS_H_
#define CHORUS_TESTS_RELIABILITY_SHARED_SLOTS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/time/time.h"

namespace chorus::testing {

// steady_clock now, in nanoseconds.
int64_t MonotonicNanos();

// Thread- and process-safe: every slot is a lock-free atomic. Create before forking; the mapping is
// released by the destructor in each process that runs it.
class SharedSlots {
 public:
  explicit SharedSlots(size_t count);
  ~SharedSlots();
  SharedSlots(const SharedSlots&) = delete;
  SharedSlots& operator=(const SharedSlots&) = delete;

  std::atomic<int64_t>& operator[](size_t index) { return slots_[index]; }

  // Waits until slots [first, first + count) all hold at least `value`; false at `timeout`.
  bool AwaitAtLeast(size_t first, size_t count, int64_t value, absl::Duration timeout);

 private:
  const size_t count_;
  std::atomic<int64_t>* slots_;
};

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_RELIABILITY_SHARED_SLOTS_H_
