#include "tests/reliability/shared_slots.h"

#include <sys/mman.h>

#include <chrono>
#include <cstdlib>
#include <new>
#include <thread>

namespace chorus::testing {

static_assert(std::atomic<int64_t>::is_always_lock_free,
              "a shared slot must not hide a process-local lock");

int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

SharedSlots::SharedSlots(size_t count) : count_(count) {
  void* memory = mmap(nullptr, count * sizeof(std::atomic<int64_t>), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) std::abort();
  slots_ = static_cast<std::atomic<int64_t>*>(memory);
  for (size_t i = 0; i < count; ++i) new (&slots_[i]) std::atomic<int64_t>(0);
}

SharedSlots::~SharedSlots() { munmap(slots_, count_ * sizeof(std::atomic<int64_t>)); }

bool SharedSlots::AwaitAtLeast(size_t first, size_t count, int64_t value, absl::Duration timeout) {
  const auto give_up = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  for (;;) {
    bool all = true;
    for (size_t i = first; i < first + count; ++i) all = all && slots_[i].load() >= value;
    if (all) return true;
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace chorus::testing
