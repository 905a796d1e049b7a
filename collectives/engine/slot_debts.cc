#include "chorus/collectives/engine/slot_debts.h"

#include <algorithm>

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

void SlotDebts::Owe(int peer, int index, uint64_t stamp) {
  std::lock_guard<std::mutex> lock(mu_);
  debts_.push_back({peer, index, stamp});
  any_.store(true, std::memory_order_release);
}

void SlotDebts::Settle(SharedSlots& slots) {
  if (!any_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto settled = [&](const Debt& debt) {
    SharedSlot& slot = *slots.Slot(debt.peer, debt.index);
    const uint64_t now = slot.stamp.load(std::memory_order_acquire);
    if (now == debt.stamp) {
      slot.read.fetch_add(1, std::memory_order_acq_rel);
      return true;
    }
    return now != 0 && Past(now, debt.stamp);
  };
  debts_.erase(std::remove_if(debts_.begin(), debts_.end(), settled), debts_.end());
  any_.store(!debts_.empty(), std::memory_order_release);
}

size_t SlotDebts::owed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return debts_.size();
}

}  // namespace chorus
