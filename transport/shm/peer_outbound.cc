#include "chorus/transport/shm/peer_outbound.h"

#include <thread>
#include <utility>

namespace chorus::shm {

void PeerOutbound::Open(uint64_t eager_bytes, int rank, uint64_t job_hash) {
  writer_ = RingWriter(outbox_->area());
  eager_limit_ = std::min<uint64_t>(eager_bytes, writer_.max_payload());
  for (int slot = kSlotsPerPeer - 1; slot >= 0; --slot) free_slots_.push_back(slot);

  AreaControl& control = *outbox_->area().control;
  control.producer_job_hash = job_hash;
  control.producer_rank = rank;
  control.attached.store(1, std::memory_order_release);
  outbox_->header().attach_epoch.fetch_add(1, std::memory_order_acq_rel);
  RingDoorbell(outbox_->header());
}

void PeerOutbound::Unqueue(const ShmRequest& request) {
  send_queue_.erase(std::remove_if(send_queue_.begin(), send_queue_.end(),
                                   [&](const std::shared_ptr<ShmRequest>& queued) {
                                     return queued.get() == &request;
                                   }),
                    send_queue_.end());
}

void PeerOutbound::QueueControl(RecordType type, uint32_t slot_ref, uint64_t length) {
  Record record{};
  record.type = type;
  record.slot_ref = slot_ref;
  record.length = length;
  control_queue_.push_back(record);
}

void PeerOutbound::ClearedToSend(uint32_t slot_ref) {
  const std::shared_ptr<ShmRequest>& request = announced_[SlotIndex(slot_ref)];
  if (request == nullptr || request->slot_ref_ != slot_ref) return;
  if (request->IsDone() && request->private_copy_ == nullptr) return;
  request->stage_ = ShmRequest::Stage::kStreaming;
  streams_.push_back(request);
}

std::shared_ptr<ShmRequest> PeerOutbound::Finished(uint32_t slot_ref) {
  const int slot = SlotIndex(slot_ref);
  if (announced_[slot] == nullptr || announced_[slot]->slot_ref_ != slot_ref) return nullptr;
  free_slots_.push_back(slot);
  return std::move(announced_[slot]);
}

bool PeerOutbound::CancelSlot(const ShmRequest& request, uint32_t* observed) {
  const uint32_t generation = SlotGeneration(request.slot_ref_);
  *observed = SlotWord(generation, kSlotPosted);
  return slot_word(request.slot_).compare_exchange_strong(
      *observed, SlotWord(generation, kSlotCancelled), std::memory_order_acq_rel);
}

PeerOutbound::Cancelled PeerOutbound::Cancel(ShmRequest& request) {
  uint32_t observed;
  if (CancelSlot(request, &observed)) {
    // Its descriptor will fail to claim the slot.
    announced_[request.slot_].reset();
    free_slots_.push_back(request.slot_);
    return Cancelled::kWithdrawn;
  }
  switch (SlotStateOf(observed)) {
    case kSlotStaging:
      request.private_copy_.reset(new char[request.size_]);
      std::memcpy(request.private_copy_.get() + request.streamed_,
                  request.data_ + request.streamed_, request.size_ - request.streamed_);
      request.data_ = request.private_copy_.get();
      return Cancelled::kCopied;
    case kSlotDone:
      return Cancelled::kDelivered;
    default:
      return Cancelled::kBeingRead;
  }
}

void PeerOutbound::WithdrawAll() {
  for (const std::shared_ptr<ShmRequest>& request : announced_) {
    uint32_t observed;
    if (request != nullptr && !request->IsDone()) CancelSlot(*request, &observed);
  }
}

void PeerOutbound::AwaitInPlaceReads(const Deadline& give_up) const {
  for (const std::shared_ptr<ShmRequest>& request : announced_) {
    if (request == nullptr || request->IsDone()) continue;
    const uint32_t reading = SlotWord(SlotGeneration(request->slot_ref_), kSlotReading);
    while (slot_word(request->slot_).load(std::memory_order_acquire) == reading &&
           !give_up.Expired()) {
      std::this_thread::yield();
    }
  }
}

void PeerOutbound::Clear() {
  send_queue_.clear();
  for (std::shared_ptr<ShmRequest>& request : announced_) request.reset();
  streams_.clear();
  control_queue_.clear();
}

}  // namespace chorus::shm
