// Slots in memory that every rank of a mesh maps: each rank writes its own slots, and its peers
// read them in place. What the collectives' smallest messages between ranks of one host ride on:
// a write and a few loads of shared cache lines, with no request, queue, lock or system call.
//
// Each rank has kDepth slots. A slot carries a stamp (which collective its contents belong to)
// and up to kCapacity bytes. The owner writes the bytes, then stores the stamp with release; a
// reader that loads the stamp with acquire sees the bytes, copies what it needs and then adds one
// to `read`. The owner reuses a slot only once `read` has reached the number of readers it
// announced for the previous contents, so a slow reader never sees its bytes change.
//
// Each rank also has one buffer of kBufferBytes beside its slots, for calls too large for a slot:
// a slot then carries the header and stamps, the buffer the data, at `buffer_offset`. A call
// takes one half, so that the owner can fill one half while its peers still read the other, or
// the whole buffer (the collectives decide which). The owner fills a region only once
// the readers of the calls that last used it are done (their `read` on those calls' slots), and
// may mark a second result in it with `done` (a second stamp).
//
// The layout is plain memory shared between processes: fixed-size fields and lock-free atomics.
#ifndef CHORUS_TRANSPORT_SHARED_SLOTS_H_
#define CHORUS_TRANSPORT_SHARED_SLOTS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "chorus/transport/request.h"

namespace chorus {

struct alignas(64) SharedSlot {
  static constexpr size_t kCapacity = 4160;

  // The first cache line holds the stamp and the start of the data (a small call's header
  // and first 8 bytes of payload): a reader that sees the stamp has them in the same transfer.
  // Which collective the contents belong to, as the owner names it (never 0; 0: never
  // written); stored last, with release.
  std::atomic<uint64_t> stamp;
  uint32_t bytes;           // of `data` in use
  uint32_t readers;         // how many peers read these contents
  uint8_t data[kCapacity];  // 8-byte aligned, so an element that starts on its size stays so
  uint32_t buffer_offset;   // where in the owner's buffer the data is, when it is there
  // Peers done reading the contents (each counts itself once it has copied what it needs).
  alignas(64) std::atomic<uint32_t> read;
  // A second stamp, for a collective with a second step: the owner stores `stamp` here, with
  // release, once what that step reads is in place (the reduced piece of an allreduce).
  alignas(64) std::atomic<uint64_t> done;

  // Counts one reader done with the contents. The only reader stores the count, which takes
  // no locked instruction: one would wait until this core's stores to shared lines had reached
  // their readers, about a cache-line handoff. Several readers add.
  void CountRead() {
    if (readers == 1) {
      read.store(1, std::memory_order_release);
    } else {
      read.fetch_add(1, std::memory_order_acq_rel);
    }
  }
};
static_assert(offsetof(SharedSlot, data) % 8 == 0, "slot data is 8-byte aligned");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");

// A mesh's slots, for the one communicator that claims them (Mesh::ClaimSharedSlots).
// Thread-safe.
class SharedSlots {
 public:
  // Slots per rank: how many collectives on them may be in flight at once before the next
  // waits for the oldest to be read.
  static constexpr int kDepth = 64;
  // Bytes of each rank's buffer.
  static constexpr size_t kBufferBytes = size_t{8} << 20;

  virtual ~SharedSlots() = default;

  // Maps every peer's slots (once; later calls return at once). An error names the first peer
  // that cannot be reached.
  virtual absl::Status AttachAll() = 0;
  // Slot `index` (0 <= index < kDepth) of `rank`: this rank's own, or, after AttachAll, a
  // peer's.
  virtual SharedSlot* Slot(int rank, int index) = 0;
  // The buffer of `rank` (kBufferBytes, 64-byte aligned), on the same terms as Slot.
  virtual uint8_t* Buffer(int rank) = 0;
  // What the transport knows of `rank`: OK, or the failure that ended it (it died, or aborted
  // or closed its mesh; this rank's own mesh aborted), naming the rank.
  virtual absl::Status PeerStatus(int rank) = 0;
  // Whether a message with `tag` from `rank` has arrived and waits for its receive: a peer that
  // runs a collective over messages where this rank runs it on the slots.
  virtual bool MessageWaiting(int rank, Tag tag) = 0;
  // Whether this host's ranks outnumber the cores this process may run on: a waiter then
  // yields the core at every poll, so that the rank it waits for can run.
  virtual bool oversubscribed() const = 0;
};

}  // namespace chorus

#endif  // CHORUS_TRANSPORT_SHARED_SLOTS_H_
