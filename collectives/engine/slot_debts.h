// Reads of peers' shared slots (transport/shared_slots.h) that a communicator's collectives owe.
//
// A peer reuses a slot only once every reader it announced has counted itself done. A
// collective that ends early (its deadline, Work::Abort, a failure) without reading a slot it
// was counted for would leave that slot stuck, and the peer's collective that next needs it
// waiting for ever. So it records the debt here, and later collectives settle it: once the slot
// holds what was owed they count this rank a reader, unread; a debt for contents the peer never
// wrote (its own collective ended first) is forgotten once the slot has moved past them.
//
// Thread-safe.
#ifndef CHORUS_COLLECTIVES_ENGINE_SLOT_DEBTS_H_
#define CHORUS_COLLECTIVES_ENGINE_SLOT_DEBTS_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "chorus/transport/shared_slots.h"

namespace chorus {

class SlotDebts {
 public:
  // A read of slot `index` of `peer` holding `stamp` (a collective's header tag) is owed.
  void Owe(int peer, int index, uint64_t stamp);
  // Pays what can be paid and forgets what never will be; a load when nothing is owed.
  void Settle(SharedSlots& slots);

  size_t owed() const;

 private:
  struct Debt {
    int peer;
    int index;
    uint64_t stamp;
  };
  mutable std::mutex mu_;
  std::vector<Debt> debts_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> any_{false};
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_ENGINE_SLOT_DEBTS_H_
