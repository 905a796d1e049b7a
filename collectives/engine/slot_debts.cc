#include "chorus/collectives/engine/slot_debts.h"

#include <algorithm>
#include <cstring>

#include "absl/container/inlined_vector.h"

namespace chorus {
namespace {

// The 31-bit sequence number in a collective's tag (tag.h).
int64_t SequenceOf(uint64_t stamp) { return static_cast<int64_t>((stamp >> 16) & 0x7fffffff); }

// Whether a slot stamped `now` has moved past contents stamped `owed`: later in the sequence
// (modulo 2^31, as the tags count).
bool Past(uint64_t now, uint64_t owed) {
  const int64_t ahead = (SequenceOf(now) - SequenceOf(owed)) & 0x7fffffff;
  return ahead != 0 && ahead < (int64_t{1} << 30);
}

}  // namespace

SlotDisagreement SlotDebts::OverMessages(const Debt& debt) {
  SlotDisagreement disagreement;
  disagreement.peer = debt.peer;
  disagreement.mine = debt.mine;
  disagreement.over_messages = true;
  return disagreement;
}

void SlotDebts::Push(const Debt& debt) {
  std::lock_guard<std::mutex> lock(mu_);
  debts_.push_back(debt);
  any_.store(true, std::memory_order_release);
}

void SlotDebts::Owe(int peer, int index, uint64_t stamp) {
  Push({peer, index, stamp, /*checked=*/false, {}});
}

void SlotDebts::OweCheck(int peer, int index, uint64_t stamp, const CollectiveHeader::Wire& mine) {
  Push({peer, index, stamp, /*checked=*/true, mine});
}

std::optional<SlotDisagreement> SlotDebts::Settle(SharedSlots& slots) {
  if (!any_.load(std::memory_order_acquire)) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  auto settled = [&](const Debt& debt) {
    SharedSlot& slot = *slots.Slot(debt.peer, debt.index);
    const uint64_t now = slot.stamp.load(std::memory_order_acquire);
    if (now != debt.stamp) {
      if (now == 0 || !Past(now, debt.stamp)) return false;
      // The peer never put the owed call in this slot: it failed before it did, or it ran the
      // call over messages, which is a disagreement to keep.
      if (debt.checked && !disagreement_ && slots.MessageWaiting(debt.peer, debt.stamp)) {
        disagreement_ = OverMessages(debt);
      }
      return true;
    }
    if (debt.checked) {
      const size_t bytes = std::min<size_t>(slot.bytes, CollectiveHeader::kWireSize);
      if (!SameWire(debt.mine, slot.data, bytes) && !disagreement_) {
        disagreement_.emplace();
        disagreement_->peer = debt.peer;
        disagreement_->mine = debt.mine;
        std::memcpy(disagreement_->theirs.data(), slot.data, bytes);
        disagreement_->theirs_bytes = bytes;
      }
    }
    slot.CountRead();
    return true;
  };
  // A rank takes its slots in sequence order and debts are pushed in that order, so once a
  // peer has not yet published what one debt waits for, it has not published what any later
  // debt to it waits for either: those are kept unlooked-at, which saves a load of a line the
  // peer may be writing for each of them (a root running ahead owes one a call).
  absl::InlinedVector<int, 8> behind;
  auto kept = debts_.begin();
  for (const Debt& debt : debts_) {
    const bool waiting = std::find(behind.begin(), behind.end(), debt.peer) != behind.end();
    if (!waiting && settled(debt)) continue;
    if (!waiting) behind.push_back(debt.peer);
    *kept++ = debt;
  }
  debts_.erase(kept, debts_.end());
  any_.store(!debts_.empty() || disagreement_, std::memory_order_release);
  return disagreement_;
}

std::optional<SlotDisagreement> SlotDebts::Probe(SharedSlots& slots) {
  if (!any_.load(std::memory_order_acquire)) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  for (const Debt& debt : debts_) {
    if (disagreement_) break;
    if (debt.checked && slots.MessageWaiting(debt.peer, debt.stamp)) {
      disagreement_ = OverMessages(debt);
    }
  }
  any_.store(!debts_.empty() || disagreement_, std::memory_order_release);
  return disagreement_;
}

size_t SlotDebts::owed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return debts_.size();
}

}  // namespace chorus
