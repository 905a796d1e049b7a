// Credit-based flow control of one connection's eager slots, both directions. Pure
// bookkeeping (no verbs calls), unit-tested without a device.
//
// The receiver owns `slots` slots for the sender's messages. The sender writes them in turn
// (slot i of the i-th message, mod slots) and may have at most `slots` unfreed at once; the
// receiver frees them in the order they were written and reports how many it has freed so far
// (a count mod 2^30) in the header of every slot it writes back, or alone once half the window
// is owed and nothing else is going back. So a slow receiver only stops the sender, which
// queues; it never makes the sender overrun a slot or meet receiver-not-ready.
#ifndef CHORUS_TRANSPORT_IBVERBS_CREDIT_WINDOW_H_
#define CHORUS_TRANSPORT_IBVERBS_CREDIT_WINDOW_H_

#include <cstdint>

#include "chorus/transport/ibverbs/wire.h"

namespace chorus::ibverbs {

class CreditWindow {
 public:
  explicit CreditWindow(uint32_t slots) : slots_(slots) {}

  uint32_t slots() const { return slots_; }

  // --- Sending ---
  // Whether a slot of the peer's is free to write.
  bool CanSend() const { return sent_ - returned_ < slots_; }
  // The slot the next message goes to; call Sent() once it is written.
  uint32_t NextSlot() const { return static_cast<uint32_t>(sent_ % slots_); }
  void Sent() { ++sent_; }
  // Slots written and not yet reported freed.
  uint32_t InFlight() const { return static_cast<uint32_t>(sent_ - returned_); }
  // Takes the peer's count of freed slots (mod 2^30). False when it claims more slots freed
  // than were ever written (a broken peer); nothing changes then.
  bool Returned(uint32_t freed_count) {
    const uint32_t advance = (freed_count - static_cast<uint32_t>(returned_)) & kImmediateValueMask;
    if (advance > sent_ - returned_) return false;
    returned_ += advance;
    return true;
  }

  // --- Receiving ---
  // The slot the peer's next message lands in (they arrive in order).
  uint32_t NextArrivalSlot() const { return static_cast<uint32_t>(freed_ % slots_); }
  void Freed() { ++freed_; }
  // The count to report (mod 2^30); call Reported() when it has gone out.
  uint32_t FreedCount() const { return static_cast<uint32_t>(freed_) & kImmediateValueMask; }
  void Reported() { reported_ = freed_; }
  // True once half the window is freed and unreported: report it alone then, or the sender
  // may stall waiting for it.
  bool OwesReport() const { return freed_ - reported_ >= (slots_ + 1) / 2; }
  bool AnythingUnreported() const { return freed_ != reported_; }

 private:
  const uint32_t slots_;
  uint64_t sent_ = 0;
  uint64_t returned_ = 0;
  uint64_t freed_ = 0;
  uint64_t reported_ = 0;
};

}  // namespace chorus::ibverbs

#endif  // CHORUS_TRANSPORT_IBVERBS_CREDIT_WINDOW_H_
