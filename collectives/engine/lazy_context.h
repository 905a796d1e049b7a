// A collective's context, made only once the call needs one. A call on the shared slots
// (algorithms/shared_slots.cc) moves its data through shared memory and checks headers there:
// it needs a CollectiveContext only to report a failure or a disagreement, to cancel, or to
// take a header a peer sent as a message. A small blocking call that does none of these (most
// of them) never makes one, which spares it about a sixth of its instructions. Everything else
// such a call asks for is served here, from the communicator's state, as the context would
// serve it.
//
// Used by the one thread that runs the collective, like the context.
#ifndef CHORUS_COLLECTIVES_ENGINE_LAZY_CONTEXT_H_
#define CHORUS_COLLECTIVES_ENGINE_LAZY_CONTEXT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "chorus/collectives/collective_args.h"
#include "chorus/collectives/engine/comm_state.h"
#include "chorus/collectives/engine/context.h"
#include "chorus/collectives/engine/header.h"
#include "chorus/core/deadline.h"
#include "chorus/transport/request.h"

namespace chorus {

class LazyContext {
 public:
  // A context already made (an asynchronous call, which Work::Abort cancels through it).
  explicit LazyContext(CollectiveContext& made);
  // A blocking call's: its context, when it needs one, is made from these.
  LazyContext(CommState& comm, const CollectiveArgs& args, const CollectiveHeader& header,
              Deadline deadline, uint32_t slot_turn);
  LazyContext(const LazyContext&) = delete;
  LazyContext& operator=(const LazyContext&) = delete;

  // The context, made on first use.
  CollectiveContext& get();

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  const CollectiveHeader& header() const { return header_; }
  const CollectiveHeader::Wire& header_wire() const { return wire_; }
  Tag header_tag() const;
  Deadline deadline() const { return deadline_; }
  SharedSlots* shared_slots() const { return comm_.shared_slots(); }
  SlotDebts& slot_debts() { return comm_.slot_debts(); }
  bool IsSlotTurn() { return comm_.slot_turns().IsTurn(slot_turn_); }
  // The rank before this one on the header ring (engine/header_ring.h).
  int RingPredecessor() const;

  // As the context's (context.h); each makes the context only for what it reports.
  absl::Status CheckWire(int peer, const uint8_t* wire, size_t bytes);
  absl::Status SettleSlotDebts(bool probe = false);
  std::optional<absl::Status> Interrupted();
  std::string Describe() const;

 private:
  CommState& comm_;
  const CollectiveArgs& args_;
  const CollectiveHeader& header_;
  const CollectiveHeader::Wire wire_;
  const Deadline deadline_;
  const uint32_t slot_turn_;
  CollectiveContext* ctx_;  // the context once made (or given)
  std::optional<CollectiveContext> made_;
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_ENGINE_LAZY_CONTEXT_H_
