#include "chorus/collectives/engine/lazy_context.h"

#include "absl/strings/str_cat.h"
#include "chorus/collectives/engine/tag.h"

namespace chorus {

LazyContext::LazyContext(CollectiveContext& made)
    : comm_(made.comm()),
      args_(made.args()),
      header_(made.header()),
      wire_(made.header_wire()),
      deadline_(made.deadline()),
      slot_turn_(made.slot_turn()),
      ctx_(&made) {}

LazyContext::LazyContext(CommState& comm, const CollectiveArgs& args,
                         const CollectiveHeader& header, Deadline deadline, uint32_t slot_turn)
    : comm_(comm),
      args_(args),
      header_(header),
      wire_(header.Encode()),
      deadline_(deadline),
      slot_turn_(slot_turn),
      ctx_(nullptr) {}

CollectiveContext& LazyContext::get() {
  if (ctx_ == nullptr) {
    made_.emplace(comm_, args_, header_, deadline_);
    made_->set_slot_turn(slot_turn_);
    ctx_ = &*made_;
  }
  return *ctx_;
}

Tag LazyContext::header_tag() const {
  return CollectiveTag(comm_.tag_id(), header_.sequence, kHeaderStep);
}

int LazyContext::RingPredecessor() const { return comm_.header_ring().Prev(comm_.rank()); }

absl::Status LazyContext::CheckWire(int peer, const uint8_t* wire, size_t bytes) {
  if (SameWire(wire_, wire, bytes)) return absl::OkStatus();
  return get().CheckWire(peer, wire, bytes);
}

absl::Status LazyContext::SettleSlotDebts(bool probe) {
  SharedSlots* slots = comm_.shared_slots();
  if (slots == nullptr) return absl::OkStatus();
  const std::optional<SlotDisagreement> found = comm_.slot_debts().SettleOrProbe(*slots, probe);
  return found ? get().ReportSlotDisagreement(*found) : absl::OkStatus();
}

std::optional<absl::Status> LazyContext::Interrupted() {
  // Only a made context can have been cancelled; a broken communicator is reported by one.
  if (ctx_ == nullptr && comm_.broken().ok()) return std::nullopt;
  return get().Interrupted();
}

std::string LazyContext::Describe() const {
  return absl::StrCat(header_.Describe(), " on rank ", comm_.rank());
}

}  // namespace chorus
