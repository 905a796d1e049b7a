// The order in which one rank's calls use the shared slots (transport/shared_slots.h): one at a
// time, by sequence number, as every rank numbers them alike.
//
// Two calls of one rank on the slots at once (an asynchronous one on a worker and a blocking one
// on the caller's thread, say) could take a slot in opposite orders on two ranks and wait for
// each other for ever, or one could overwrite a slot the other still reads. So a call that will
// run on the slots takes its sequence number here (Take, under the lock that keeps the queue in
// sequence order), waits until it is the oldest (IsTurn) and leaves (Done) however it ended.
//
// Thread-safe.
#ifndef CHORUS_COLLECTIVES_ENGINE_SLOT_TURNS_H_
#define CHORUS_COLLECTIVES_ENGINE_SLOT_TURNS_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace chorus {

class SlotTurns {
 public:
  // The next sequence number of `next_sequence`, queued as a call on the slots.
  uint32_t Take(std::atomic<uint32_t>& next_sequence);
  // Whether the call numbered `sequence` is the oldest queued; a load.
  bool IsTurn(uint32_t sequence) const {
    return head_.load(std::memory_order_acquire) == static_cast<int64_t>(sequence);
  }
  // The call numbered `sequence` has ended.
  void Done(uint32_t sequence);

 private:
  std::mutex mu_;
  std::deque<uint32_t> queue_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> head_{-1};  // queue_.front(), or -1
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_ENGINE_SLOT_TURNS_H_
