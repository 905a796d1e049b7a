#include "chorus/collectives/engine/slot_turns.h"

#include <algorithm>

namespace chorus {

SlotTurns::Numbers SlotTurns::Take(bool turn) {
  uint64_t next = next_.load(std::memory_order_relaxed);
  Numbers taken;
  uint64_t after;
  do {
    taken = {static_cast<uint32_t>(next), static_cast<uint32_t>(next >> 32)};
    const uint32_t next_turn = turn ? taken.turn + 1 : taken.turn;
    after = (uint64_t{next_turn} << 32) | static_cast<uint32_t>(taken.sequence + 1);
  } while (!next_.compare_exchange_weak(next, after, std::memory_order_relaxed));
  return taken;
}

void SlotTurns::Done(uint32_t turn) {
  // Only the holder of the served turn moves it on (SkipGivenUp moves only past turns given
  // up), so a turn served now is this call's to end.
  if (serving_.load(std::memory_order_acquire) == turn) {
    serving_.store(turn + 1, std::memory_order_release);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    given_up_.push_back(turn);
    any_given_up_.store(true, std::memory_order_release);
  }
  // The turn may have come meanwhile, with no later call waiting to move past it.
  SkipGivenUp();
}

void SlotTurns::SkipGivenUp() {
  std::lock_guard<std::mutex> lock(mu_);
  // A served turn not given up is its holder's to move on: leave serving_ alone then.
  const uint32_t served = serving_.load(std::memory_order_acquire);
  uint32_t serving = served;
  for (auto it = std::find(given_up_.begin(), given_up_.end(), serving); it != given_up_.end();
       it = std::find(given_up_.begin(), given_up_.end(), serving)) {
    given_up_.erase(it);
    ++serving;
  }
  if (serving != served) serving_.store(serving, std::memory_order_release);
  any_given_up_.store(!given_up_.empty(), std::memory_order_release);
}

}  // namespace chorus
