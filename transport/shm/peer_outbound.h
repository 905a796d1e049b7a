// What this rank writes to one peer: its area in the peer's inbox and everything waiting to go
// there.
//
// Owns the ring writer and the staging chunks of that area, the order in which things are
// written (rendezvous replies first, since the peer's sends wait on them; then the queued sends,
// eagerly or announced in a rendezvous slot; then the staging chunks of the sends the peer
// cleared to stream), and the rendezvous slots: which are free, which send each announced one
// holds, and each slot's generation, so that a reply about an earlier use of a slot is told
// apart; and so what becomes of a cancelled announced send. The engine completes the sends it
// hears of through Flush's events and hands over the peer's replies (ClearedToSend, Finished).
//
// Thread-compatible: the engine's mutex guards it with the rest of the peer's state.
#ifndef CHORUS_TRANSPORT_SHM_PEER_OUTBOUND_H_
#define CHORUS_TRANSPORT_SHM_PEER_OUTBOUND_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "chorus/core/deadline.h"
#include "chorus/transport/shm/doorbell.h"
#include "chorus/transport/shm/layout.h"
#include "chorus/transport/shm/ring.h"
#include "chorus/transport/shm/segment.h"
#include "chorus/transport/shm/shm_request.h"

namespace chorus::shm {

class PeerOutbound {
 public:
  // Takes this rank's area in the peer's inbox, as attached.
  void Attach(std::unique_ptr<PeerInbox> outbox) { outbox_ = std::move(outbox); }
  // Opens the area for writing, with messages up to `eager_bytes` (or what a record holds)
  // sent eagerly, and tells the peer that `rank` of the job `job_hash` writes it.
  void Open(uint64_t eager_bytes, int rank, uint64_t job_hash);

  // The peer's inbox header (after Attach).
  InboxHeader& header() const { return outbox_->header(); }
  // The peer's shared slots (after Attach).
  SharedSlot* shared_slots() const { return outbox_->shared_slots(); }
  // The word of rendezvous slot `slot` (after Attach), which the peer claims.
  std::atomic<uint32_t>& slot_word(int slot) const { return outbox_->area().control->slots[slot]; }
  uint64_t eager_limit() const { return eager_limit_; }

  void QueueSend(std::shared_ptr<ShmRequest> request) { send_queue_.push_back(std::move(request)); }
  // Takes a send that is still queued off the queue.
  void Unqueue(const ShmRequest& request);
  // Queues a rendezvous reply about the peer's slot `slot_ref`.
  void QueueControl(RecordType type, uint32_t slot_ref, uint64_t length);

  // Writes what it can, in order, and rings the peer if it wrote anything; when blocked on ring
  // space or staging chunks, asks the peer to ring back once it frees some. `events` hears of
  // each large send about to be announced (events.Announcing(request)) and of each send whose
  // buffer is no longer needed (events.Sent(request)).
  template <typename Events>
  void Flush(Events& events);

  // The peer cleared the send announced in `slot_ref` to stream through the staging area: it
  // streams after those cleared before it. Ignored for a reply about an earlier use of the
  // slot, and for a send that failed meanwhile (a cancelled one streams its private copy).
  void ClearedToSend(uint32_t slot_ref);
  // The peer is done with the send announced in `slot_ref`: frees the slot and returns the
  // send (null for a reply about an earlier use of the slot).
  std::shared_ptr<ShmRequest> Finished(uint32_t slot_ref);
  // What became of an announced send that is cancelled.
  enum class Cancelled {
    kWithdrawn,  // the peer had not claimed it: never a message; its slot is free again
    kCopied,     // the peer streams it: the rest streams from a private copy
    kDelivered,  // the peer finished reading it just now
    kBeingRead,  // the peer is reading the send's buffer in place
  };
  // Cancels the announced (or streaming) send `request`. A peer that takes the message through
  // the staging area may hold part of it already; as with a TCP message partly on the wire, it
  // still gets the whole message (a receive never sees half of a cancelled send), and the
  // caller's buffer is free once this returns.
  Cancelled Cancel(ShmRequest& request);
  // Withdraws every announced send not yet complete, leaving its slot taken.
  void WithdrawAll();
  // Waits, at most until `give_up`, while the peer reads an announced send in place. Before a
  // peer in this process sees its sends fail: its reads copy straight out of the senders'
  // buffers, which their owners may free once the sends are complete.
  void AwaitInPlaceReads(const Deadline& give_up) const;

  // Calls `fail(request)` for each send queued or announced and not complete, then Clear().
  template <typename Fn>
  void FailAll(Fn&& fail);
  // Drops every queued send and record, announced send and stream.
  void Clear();

 private:
  // One pass of Flush; true when blocked.
  template <typename Events>
  bool FlushOnce(Events& events);
  template <typename Events>
  bool FlushSends(Events& events, bool* wrote);
  template <typename Events>
  bool PushStreams(Events& events, bool* wrote);
  // Moves `request`'s slot from posted to cancelled; else leaves it and returns false with
  // the slot's word in `*observed`.
  bool CancelSlot(const ShmRequest& request, uint32_t* observed);

  std::unique_ptr<PeerInbox> outbox_;
  RingWriter writer_;
  uint64_t eager_limit_ = 0;
  std::deque<Record> control_queue_;  // rendezvous replies waiting for ring space
  std::deque<std::shared_ptr<ShmRequest>> send_queue_;
  std::vector<int> free_slots_;
  std::array<std::shared_ptr<ShmRequest>, kSlotsPerPeer> announced_;
  std::array<uint32_t, kSlotsPerPeer> generation_{};
  std::deque<std::shared_ptr<ShmRequest>> streams_;  // cleared to stream, in order
  uint64_t chunks_produced_ = 0;
};

template <typename Events>
void PeerOutbound::Flush(Events& events) {
  if (!FlushOnce(events)) return;
  // Blocked on space: ask the consumer to ring us when it frees some, then look once more in
  // case it did in between (the consumer swaps `want_space` after freeing, before looking).
  outbox_->area().control->want_space.exchange(1, std::memory_order_seq_cst);
  FlushOnce(events);
}

template <typename Events>
bool PeerOutbound::FlushOnce(Events& events) {
  bool wrote = false;
  bool blocked = false;
  while (!control_queue_.empty()) {
    if (!writer_.TryWrite(control_queue_.front())) {
      blocked = true;
      break;
    }
    control_queue_.pop_front();
    wrote = true;
  }
  if (!blocked) blocked = FlushSends(events, &wrote);
  if (!blocked) blocked = PushStreams(events, &wrote);
  if (wrote) RingDoorbell(outbox_->header());
  return blocked;
}

template <typename Events>
bool PeerOutbound::FlushSends(Events& events, bool* wrote) {
  while (!send_queue_.empty()) {
    ShmRequest& request = *send_queue_.front();
    Record record{};
    record.tag = request.tag();
    record.length = request.size_;
    if (request.size_ <= eager_limit_) {
      record.type = RecordType::kEager;
      if (!writer_.TryWrite(record, request.data_, request.size_)) return true;
      *wrote = true;
      const std::shared_ptr<ShmRequest> sent = std::move(send_queue_.front());
      send_queue_.pop_front();
      events.Sent(*sent);
      continue;
    }
    if (free_slots_.empty()) return false;  // a kFinished record will free one
    const int slot = free_slots_.back();
    const uint32_t generation = (generation_[slot] + 1) & kSlotGenerationMask;
    // Published by the ring's release of the record below.
    slot_word(slot).store(SlotWord(generation, kSlotPosted), std::memory_order_relaxed);
    record.type = RecordType::kAnnounce;
    record.slot_ref = SlotRef(generation, slot);
    record.arg = reinterpret_cast<uint64_t>(request.data_);
    events.Announcing(request);
    if (!writer_.TryWrite(record)) return true;
    *wrote = true;
    generation_[slot] = generation;
    free_slots_.pop_back();
    request.slot_ = slot;
    request.slot_ref_ = record.slot_ref;
    request.stage_ = ShmRequest::Stage::kAnnounced;
    announced_[slot] = std::move(send_queue_.front());
    send_queue_.pop_front();
  }
  return false;
}

template <typename Events>
bool PeerOutbound::PushStreams(Events& events, bool* wrote) {
  const AreaView& out = outbox_->area();
  while (!streams_.empty()) {
    ShmRequest& request = *streams_.front();
    while (request.streamed_ < request.size_) {
      const uint64_t released = out.control->staging_released.load(std::memory_order_acquire);
      if (chunks_produced_ - released >= kStagingChunks) return true;
      const uint64_t bytes =
          std::min<uint64_t>(out.chunk_bytes(), request.size_ - request.streamed_);
      // Rewritten harmlessly if the record below does not fit yet.
      std::memcpy(out.chunk(chunks_produced_), request.data_ + request.streamed_, bytes);
      Record record{};
      record.type = RecordType::kChunk;
      record.slot_ref = request.slot_ref_;
      record.tag = request.tag();
      record.length = bytes;
      record.arg = request.streamed_;
      if (!writer_.TryWrite(record)) return true;
      *wrote = true;
      ++chunks_produced_;
      request.streamed_ += bytes;
    }
    // Every byte is in the staging area: the buffer is free. The slot stays taken until the
    // receiver's kFinished.
    const std::shared_ptr<ShmRequest> sent = std::move(streams_.front());
    streams_.pop_front();
    events.Sent(*sent);
  }
  return false;
}

template <typename Fn>
void PeerOutbound::FailAll(Fn&& fail) {
  for (const std::shared_ptr<ShmRequest>& request : send_queue_) fail(*request);
  for (const std::shared_ptr<ShmRequest>& request : announced_) {
    if (request != nullptr && !request->IsDone()) fail(*request);
  }
  Clear();
}

}  // namespace chorus::shm

#endif  // CHORUS_TRANSPORT_SHM_PEER_OUTBOUND_H_
