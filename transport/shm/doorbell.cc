#include "chorus/transport/shm/doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>

namespace chorus::shm {
namespace {

// Not FUTEX_PRIVATE_FLAG: the word is shared between processes, and between different mappings
// of the same memfd within one process.
long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const struct timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

void RingDoorbell(InboxHeader& header) {
  // A read-modify-write of `sleepers`, as the sleeper's increment is: of the two, the later
  // one sees the earlier (the sleeper then sees what we published, or we see the sleeper).
  if (header.sleepers.fetch_add(0, std::memory_order_seq_cst) == 0) return;
  WakeAll(header);
}

void WakeAll(InboxHeader& header) {
  header.doorbell.fetch_add(1, std::memory_order_release);
  Futex(&header.doorbell, FUTEX_WAKE, INT_MAX, nullptr);
}

uint32_t BeginSleep(InboxHeader& header) {
  const uint32_t seq = header.doorbell.load(std::memory_order_acquire);
  header.sleepers.fetch_add(1, std::memory_order_seq_cst);
  return seq;
}

void Sleep(InboxHeader& header, uint32_t seq, absl::Duration max) {
  if (max <= absl::ZeroDuration()) return;
  const struct timespec timeout = absl::ToTimespec(max);
  Futex(&header.doorbell, FUTEX_WAIT, seq, &timeout);
}

void EndSleep(InboxHeader& header) {
  header.sleepers.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace chorus::shm
