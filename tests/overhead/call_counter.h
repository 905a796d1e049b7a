// Counts what one thread does between Start() and Stop(): heap allocations (operator new),
// mutex acquisitions (pthread_mutex_lock and pthread_mutex_trylock, which std::mutex uses) and
// system calls (the kernel's raw_syscalls:sys_enter tracepoint, through perf_event_open).
//
// Linking this library replaces operator new and interposes the two pthread functions for the
// whole binary, so it is for test binaries built without sanitizers (which replace both
// themselves). Mutexes that do not go through pthread_mutex_lock (absl::Mutex, the futexes
// inside condition variables) are not counted.
#ifndef CHORUS_TESTS_OVERHEAD_CALL_COUNTER_H_
#define CHORUS_TESTS_OVERHEAD_CALL_COUNTER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace chorus::testing {

struct CallCounts {
  int64_t allocations = 0;
  int64_t lock_acquisitions = 0;
  int64_t syscalls = 0;

  std::string ToString() const;
};

// One per thread; not thread-safe.
class CallCounter {
 public:
  // FailedPrecondition, saying why, when system calls cannot be counted here (no tracefs and
  // no permission to mount it, or perf_event_open refused).
  static absl::StatusOr<CallCounter> ForThisThread();
  ~CallCounter();
  CallCounter(CallCounter&& other) noexcept;
  CallCounter& operator=(CallCounter&&) = delete;
  CallCounter(const CallCounter&) = delete;

  void Start();
  // What the thread did since Start(), less the counter's own system calls.
  CallCounts Stop();

 private:
  explicit CallCounter(int perf_fd) : perf_fd_(perf_fd) {}
  int64_t ReadSyscalls() const;

  int perf_fd_;
  int64_t own_syscalls_ = 0;  // the counter's own share of a Start/Stop pair
  CallCounts at_start_;
};

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_OVERHEAD_CALL_COUNTER_H_
