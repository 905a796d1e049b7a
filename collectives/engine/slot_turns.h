// The numbers of one rank's calls on a communicator, and the order in which its calls use the
// shared slots (transport/shared_slots.h): one at a time, by sequence number, as every rank
// numbers them alike.
//
// Two calls of one rank on the slots at once (an asynchronous one on a worker and a blocking one
// on the caller's thread, say) could take a slot in opposite orders on two ranks and wait for
// each other for ever, or one could overwrite a slot the other still reads. So a call that will
// run on the slots takes a turn with its sequence number (TakeTurn: both in one atomic step, so
// that turns follow sequence numbers), waits until its turn is served (IsTurn) and ends it
// (Done) however it ended. A call that ends before its turn came gives the turn up (Done), and
// the first IsTurn that finds the served turn given up moves past it.
//
// A call takes no lock on the way: numbering is one compare-and-swap, IsTurn a load, and ending
// the served turn a store. (A locked instruction also waits for this core's stores to shared
// lines to reach the peers, so on the slots each one costs about a cache-line handoff.) Only a
// turn given up takes the lock.
//
// Thread-safe.
#ifndef CHORUS_COLLECTIVES_ENGINE_SLOT_TURNS_H_
#define CHORUS_COLLECTIVES_ENGINE_SLOT_TURNS_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace chorus {

class SlotTurns {
 public:
  struct Numbers {
    uint32_t sequence;
    uint32_t turn;  // on the slots
  };

  // The next sequence number, for a call over messages.
  uint32_t NextSequence() { return Take(/*turn=*/false).sequence; }
  // The next sequence number and the next turn on the slots.
  Numbers TakeTurn() { return Take(/*turn=*/true); }
  // Whether `turn` is served: every earlier turn has ended.
  bool IsTurn(uint32_t turn) {
    if (serving_.load(std::memory_order_acquire) == turn) return true;
    if (!any_given_up_.load(std::memory_order_acquire)) return false;
    SkipGivenUp();
    return serving_.load(std::memory_order_acquire) == turn;
  }
  // The call that took `turn` has ended, in its turn or before it.
  void Done(uint32_t turn);

 private:
  Numbers Take(bool turn);
  // Moves `serving_` past the turns given up, while the served one is.
  void SkipGivenUp();

  // The next sequence number in the low half, the next turn in the high half; each wraps by
  // itself.
  std::atomic<uint64_t> next_{0};
  // The turn served. Only the call holding it moves it on, with a store; past a turn given up,
  // SkipGivenUp does, under mu_.
  std::atomic<uint32_t> serving_{0};
  std::mutex mu_;
  std::vector<uint32_t> given_up_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> any_given_up_{false};  // given_up_ is not empty
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_ENGINE_SLOT_TURNS_H_
