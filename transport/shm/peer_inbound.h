// What one peer writes to this rank: its area in our inbox, and the ways we read what it sends.
//
// Owns the reading side of that area: the ring reader, the staging transfers under way
// (InboundStreams), the slot words through which this rank claims the peer's announced
// messages, and the mapping of the peer's arena (made when the first message announced from it
// needs it), through which its shared-memory buffers are read in place. The engine decides what
// each record means, whether and how to claim an announcement, and what to answer.
//
// Thread-compatible: the engine's mutex guards it with the rest of the peer's state.
#ifndef CHORUS_TRANSPORT_SHM_PEER_INBOUND_H_
#define CHORUS_TRANSPORT_SHM_PEER_INBOUND_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "chorus/transport/shm/arena.h"
#include "chorus/transport/shm/inbound_streams.h"
#include "chorus/transport/shm/layout.h"
#include "chorus/transport/shm/ring.h"
#include "chorus/transport/shm/segment.h"

namespace chorus::shm {

class PeerInbound {
 public:
  PeerInbound() = default;
  // `area`: the peer's area in this rank's inbox.
  explicit PeerInbound(const AreaView& area) : area_(area), reader_(area), streams_(area) {}

  // Whether a writer has attached to the area, and whether it says it is `rank` of the job
  // `job_hash`.
  bool writer_attached() const {
    return area_.control->attached.load(std::memory_order_acquire) != 0;
  }
  bool WrittenBy(uint64_t job_hash, int rank) const {
    return area_.control->producer_job_hash == job_hash && area_.control->producer_rank == rank;
  }

  // The next record in the ring (RingReader::Next), and its consumption.
  const Record* Next(bool* corrupt) { return reader_.Next(corrupt); }
  void Consume(const Record& record) { reader_.Consume(record); }
  // After records were consumed: whether the peer asked to be rung once space is free (and
  // takes the request back).
  bool TakeWantSpace() {
    return area_.control->want_space.exchange(0, std::memory_order_seq_cst) != 0;
  }

  // How many of the peer's rendezvous slots towards this rank hold an announcement nobody has
  // claimed yet. The slot words, not our queues: a bounded look however many messages wait
  // unmatched, and a slot its sender withdrew no longer counts.
  int UnclaimedSlots() const;
  // Claims the announcement in `slot_ref`, moving its slot to `state`; false when its sender
  // withdrew it.
  bool Claim(uint32_t slot_ref, SlotState state);
  // This rank is done reading the announced buffer of `slot_ref`: the sender may reuse it.
  void FinishRead(uint32_t slot_ref);

  InboundStreams& streams() { return streams_; }

  // Where this process can read the `length` bytes at `address` in the peer's arena (its
  // identity published in the peer's inbox `header`), mapping the arena on first use; null
  // when they are not in it, the peer has no arena, or mapping it failed. `pid` and `peer`: the
  // peer; `rank`: this rank (for the log).
  const char* InArena(const InboxHeader& header, pid_t pid, int peer, int rank, uint64_t address,
                      uint64_t length);

 private:
  AreaView area_;
  RingReader reader_;
  InboundStreams streams_;
  // The peer's arena, mapped read-only; arena_failed_ once mapping it failed (its messages then
  // travel like those from private buffers).
  std::unique_ptr<Mapping> arena_;
  uint64_t arena_base_ = 0;  // its address in the peer's process
  bool arena_failed_ = false;
};

}  // namespace chorus::shm

#endif  // CHORUS_TRANSPORT_SHM_PEER_INBOUND_H_
