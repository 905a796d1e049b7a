// SlotTurns (collectives/engine/slot_turns.h): sequence numbers and turns on the shared slots
// come in one order, turns are served one at a time in that order, a turn given up before it
// came is skipped once it does, and threads that take turns at once never hold two together.
#include "chorus/collectives/engine/slot_turns.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

namespace chorus::testing {
namespace {

TEST_CASE("calls over messages and on the slots share one sequence") {
  SlotTurns turns;
  CHECK(turns.NextSequence() == 0);
  const SlotTurns::Numbers first = turns.TakeTurn();
  CHECK(first.sequence == 1);
  CHECK(first.turn == 0);
  CHECK(turns.NextSequence() == 2);
  const SlotTurns::Numbers second = turns.TakeTurn();
  CHECK(second.sequence == 3);
  CHECK(second.turn == 1);
}

// The turns of `count` calls on the slots, taken in order.
std::vector<uint32_t> TakeTurns(SlotTurns& turns, int count) {
  std::vector<uint32_t> taken;
  for (int i = 0; i < count; ++i) taken.push_back(turns.TakeTurn().turn);
  return taken;
}

TEST_CASE("turns are served in order, past those given up before they came") {
  SlotTurns turns;
  const std::vector<uint32_t> taken = TakeTurns(turns, 4);
  CHECK(turns.IsTurn(taken[0]));
  CHECK_FALSE(turns.IsTurn(taken[1]));
  // The second and third end (a timeout, an abort) while the first still holds the slots.
  turns.Done(taken[2]);
  turns.Done(taken[1]);
  CHECK_FALSE(turns.IsTurn(taken[3]));
  turns.Done(taken[0]);
  CHECK_FALSE(turns.IsTurn(taken[0]));
  CHECK(turns.IsTurn(taken[3]));
  turns.Done(taken[3]);
  CHECK(turns.IsTurn(turns.TakeTurn().turn));
}

TEST_CASE("the last turn given up leaves the next one served") {
  SlotTurns turns;
  const std::vector<uint32_t> taken = TakeTurns(turns, 2);
  turns.Done(taken[1]);  // no later call waits to skip it
  turns.Done(taken[0]);
  CHECK(turns.IsTurn(turns.TakeTurn().turn));
}

TEST_CASE("threads taking turns at once hold them one at a time, in sequence order") {
  constexpr int kThreads = 4;
  constexpr int kCallsPerThread = 2000;
  SlotTurns turns;
  std::atomic<int> holders{0};
  std::atomic<bool> overlapped{false};
  std::atomic<bool> out_of_order{false};
  std::atomic<int64_t> last_sequence{-1};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCallsPerThread; ++i) {
        if ((i + t) % 3 == 0) {
          turns.NextSequence();  // a call over messages in between
          continue;
        }
        const SlotTurns::Numbers numbers = turns.TakeTurn();
        // Every fifth gives its turn up before it comes, as a call that times out does.
        if ((i + t) % 5 == 0 && !turns.IsTurn(numbers.turn)) {
          turns.Done(numbers.turn);
          continue;
        }
        while (!turns.IsTurn(numbers.turn)) std::this_thread::yield();
        if (holders.fetch_add(1) != 0) overlapped = true;
        if (last_sequence.exchange(numbers.sequence) >= static_cast<int64_t>(numbers.sequence)) {
          out_of_order = true;
        }
        holders.fetch_sub(1);
        turns.Done(numbers.turn);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK_FALSE(overlapped);
  CHECK_FALSE(out_of_order);
  CHECK(turns.IsTurn(turns.TakeTurn().turn));
}

}  // namespace
}  // namespace chorus::testing
