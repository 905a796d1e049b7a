#include "chorus/transport/receive_claim.h"

#include <sched.h>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"

namespace chorus {

bool ReceiveClaim::Take(int owner, int value) {
  int expected = kNobody;
  while (!state_.compare_exchange_weak(expected, value, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
    if (expected == kNobody) continue;  // spurious failure
    if ((expected & kHeldBit) == 0) return expected == owner && value == owner;
    // Another part is checking whether its message still exists: a few atomic operations, no
    // lock, so it settles quickly; yield in case it was preempted in between.
    sched_yield();
    expected = kNobody;
  }
  return true;
}

bool ReceiveClaim::TryClaim(int owner) { return Take(owner, owner); }

bool ReceiveClaim::Hold(int owner) { return Take(owner, owner | kHeldBit); }

void ReceiveClaim::Confirm(int owner) { state_.store(owner, std::memory_order_release); }

void ReceiveClaim::Release() { state_.store(kNobody, std::memory_order_release); }

int ReceiveClaim::winner() const {
  const int state = state_.load(std::memory_order_acquire);
  return (state & kHeldBit) != 0 ? kNobody : state;
}

absl::Status WithdrawnPartError(int rank) {
  return AbortedError(absl::StrCat("rank ", rank,
                                   ": withdrawn, another part of this receive from any peer (on "
                                   "another transport) took the message"));
}

}  // namespace chorus
