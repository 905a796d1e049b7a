// Reads of peers' shared slots (transport/shared_slots.h) that a communicator's collectives owe.
//
// A peer reuses a slot only once every reader it announced has counted itself done. A
// collective that ends early (its deadline, Work::Abort, a failure) without reading a slot it
// was counted for would leave that slot stuck, and the peer's collective that next needs it
// waiting for ever. So it records the debt here, and later collectives settle it: once the slot
// holds what was owed they count this rank a reader, unread; a debt for contents the peer never
// wrote (its own collective ended first) is forgotten once the slot has moved past them.
//
// A collective may also leave a header check to later calls (a broadcast root checks its
// ring predecessor's header this way, so that it never waits for a rank that only reads from
// it): such a debt is paid once the slot holds what was owed and its header is compared with
// the one the collective had; one whose slot moved past what was owed is forgotten only after a
// look for the peer's header sent as a message instead. The first disagreement found is kept,
// and every later Settle returns it, so that the call that first can report it does (it breaks
// the communicator).
//
// Thread-safe.
#ifndef CHORUS_COLLECTIVES_ENGINE_SLOT_DEBTS_H_
#define CHORUS_COLLECTIVES_ENGINE_SLOT_DEBTS_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "chorus/collectives/engine/header.h"
#include "chorus/transport/shared_slots.h"

namespace chorus {

// A header check left to later calls that found a disagreement: `peer`'s header for the
// collective whose header was `mine`.
struct SlotDisagreement {
  int peer = -1;
  CollectiveHeader::Wire mine{};
  // The peer's header, or (`over_messages`) none: the peer sent the collective's header as a
  // message instead (its arguments chose another algorithm).
  CollectiveHeader::Wire theirs{};
  size_t theirs_bytes = 0;
  bool over_messages = false;
};

class SlotDebts {
 public:
  // A read of slot `index` of `peer` holding `stamp` (a collective's header tag) is owed.
  void Owe(int peer, int index, uint64_t stamp);
  // As Owe, and the slot's header must equal `mine`.
  void OweCheck(int peer, int index, uint64_t stamp, const CollectiveHeader::Wire& mine);
  // Pays what can be paid and forgets what never will be; a load when nothing is owed. Returns
  // the first disagreement a check has found, now or before.
  std::optional<SlotDisagreement> Settle(SharedSlots& slots);
  // Whether a peer owed a check has sent that collective's header as a message instead (the
  // shared slots' header tag is the message's): a disagreement, kept as Settle's are.
  std::optional<SlotDisagreement> Probe(SharedSlots& slots);
  // Settle, then, when it found nothing and `probe` is set, Probe.
  std::optional<SlotDisagreement> SettleOrProbe(SharedSlots& slots, bool probe) {
    std::optional<SlotDisagreement> found = Settle(slots);
    if (!found && probe) found = Probe(slots);
    return found;
  }

  size_t owed() const;

 private:
  struct Debt {
    int peer;
    int index;
    uint64_t stamp;
    bool checked;
    CollectiveHeader::Wire mine;  // when checked
  };
  void Push(const Debt& debt);
  // `debt`'s peer sent the collective's header as a message.
  static SlotDisagreement OverMessages(const Debt& debt);

  mutable std::mutex mu_;
  std::vector<Debt> debts_ ABSL_GUARDED_BY(mu_);
  std::optional<SlotDisagreement> disagreement_ ABSL_GUARDED_BY(mu_);
  // Something is owed or a disagreement is kept.
  std::atomic<bool> any_{false};
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_ENGINE_SLOT_DEBTS_H_
