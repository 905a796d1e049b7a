#include "chorus/collectives/engine/slot_turns.h"

#include <algorithm>

namespace chorus {

uint32_t SlotTurns::Take(std::atomic<uint32_t>& next_sequence) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t sequence = next_sequence.fetch_add(1);
  queue_.push_back(sequence);
  if (queue_.size() == 1) head_.store(sequence, std::memory_order_release);
  return sequence;
}

void SlotTurns::Done(uint32_t sequence) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = std::find(queue_.begin(), queue_.end(), sequence);
  if (it != queue_.end()) queue_.erase(it);
  head_.store(queue_.empty() ? -1 : static_cast<int64_t>(queue_.front()),
              std::memory_order_release);
}

}  // namespace chorus
