// The shared-memory layout of a rank's inbox: everything other ranks write to reach it.
//
// Each rank of a mesh owns one inbox segment (a memfd, never a name in /dev/shm):
//
//   offset 0            InboxHeader (one page): identity, layout parameters, the doorbell
//   kPageBytes + i*A    PeerArea for sender rank i (A = area_bytes, a multiple of the page):
//                         AreaControl (rounded up to a page): ring indices, flags, slot states
//                         ring data       ring_bytes (power of two): records from rank i
//                         staging data    staging_bytes: large-message chunks from rank i
//   kPageBytes + n*A    the owner's shared slots (shared_slots.h), then its buffer: written by
//                       the owner, read (and the slots' `read` counts bumped) by every peer
//
// The area of rank i is written by exactly one process (rank i, the producer) and read by the
// owner (the consumer), so each ring is single-producer/single-consumer. A sender maps only the
// header page, its own area and the shared slots of a peer's inbox. Pages are untouched until used
// (memfd pages are allocated on first write), so an area for a peer that never sends costs address
// space only.
//
// Everything here is shared between processes: only fixed-size types, only lock-free atomics
// (which are address-free on Linux/x86-64 and aarch64), no pointers except the probe address,
// which is read only through process_vm_readv.
#ifndef CHORUS_TRANSPORT_SHM_LAYOUT_H_
#define CHORUS_TRANSPORT_SHM_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "chorus/transport/shared_slots.h"

namespace chorus::shm {

constexpr uint64_t kInboxMagic = 0x31484D5355524F48ull;  // arbitrary; marks a Chorus inbox
constexpr uint32_t kLayoutVersion = 7;  // bumped with every change to what peers map
constexpr size_t kPageBytes = 4096;
constexpr size_t kCacheLine = 64;

// Rendezvous slots per directed pair: how many large sends one rank may have announced to one
// peer and not yet seen finished. Further large sends wait in the sender's queue.
constexpr int kSlotsPerPeer = 64;

// The staging area of a pair is cut into this many chunks, so the sender fills one while the
// receiver drains another.
constexpr int kStagingChunks = 8;

static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");

// The first page of an inbox. The identity block is written by the owner before its address is
// published and never changes; the atomics below it are shared.
struct InboxHeader {
  uint64_t magic;
  uint32_t version;
  int32_t rank;
  int32_t size;
  int32_t owner_pid;
  uint64_t job_hash;
  uint64_t nonce;          // random; names this inbox in addresses and the in-process registry
  uint64_t ring_bytes;     // per area
  uint64_t staging_bytes;  // per area
  uint64_t area_bytes;     // stride between areas
  uint64_t probe_address;  // an address in the owner's private memory holding probe_value,
  uint64_t probe_value;    // so peers can test whether process_vm_readv works against the owner

  // Wake-up. Threads of the owner that have nothing to do sleep on `doorbell` (a futex) after
  // incrementing `sleepers`; a writer that published something bumps the doorbell and wakes
  // them, but only when sleepers > 0, so a busy receiver costs its senders no system call.
  alignas(kCacheLine) std::atomic<uint32_t> doorbell;
  alignas(kCacheLine) std::atomic<uint32_t> sleepers;
  // Bumped by a peer after it sets `attached` in its area, so the owner notices new senders
  // with one load instead of scanning every area.
  alignas(kCacheLine) std::atomic<uint64_t> attach_epoch;
  // A CloseState, set by the owner when its mesh closes: nothing sent to it is read after.
  std::atomic<uint32_t> closed;

  // The owner's shared-memory arena (arena.h), written once by the owner before it announces
  // the first message from it: the other fields first, then arena_bytes with release. 0 while
  // there is none. Peers map it to read such messages in place.
  alignas(kCacheLine) int32_t arena_fd;
  uint64_t arena_base;
  uint64_t arena_nonce;
  std::atomic<uint64_t> arena_bytes;
};

enum CloseState : uint32_t {
  kOpen = 0,
  kClosedDestroyed = 1,  // the mesh was destroyed: the rank left in good order
  kClosedAborted = 2,    // Mesh::Abort
};
static_assert(sizeof(InboxHeader) <= kPageBytes, "the header must fit its page");

// The state of a rendezvous slot word: (generation << kSlotStateBits) | SlotState. The
// generation makes a stale descriptor (one whose send was cancelled and whose slot was reused)
// fail its compare-and-swap instead of claiming the new send.
enum SlotState : uint32_t {
  kSlotPosted = 1,     // sender announced the buffer; nobody touches it yet
  kSlotReading = 2,    // receiver is copying straight out of the sender's buffer
  kSlotStaging = 3,    // receiver asked the sender to stream it through the staging area
  kSlotDone = 4,       // receiver finished with the sender's buffer (read or discarded)
  kSlotCancelled = 5,  // sender withdrew it before the receiver claimed it
};
constexpr uint32_t kSlotStateBits = 3;
constexpr uint32_t kSlotGenerationMask = (1u << 24) - 1;

inline uint32_t SlotWord(uint32_t generation, SlotState state) {
  return ((generation & kSlotGenerationMask) << kSlotStateBits) | state;
}
inline SlotState SlotStateOf(uint32_t word) {
  return static_cast<SlotState>(word & ((1u << kSlotStateBits) - 1));
}

// The control block at the start of each area. Producer-written and consumer-written fields
// sit on separate cache lines.
struct AreaControl {
  alignas(kCacheLine) std::atomic<uint64_t> tail;              // producer: bytes ever written
  alignas(kCacheLine) std::atomic<uint64_t> head;              // consumer: bytes ever consumed
  alignas(kCacheLine) std::atomic<uint64_t> staging_released;  // consumer: chunks ever freed
  // Written by the producer before it sets `attached`, so the owner can refuse a writer that
  // does not belong to its job.
  alignas(kCacheLine) uint64_t producer_job_hash;
  int32_t producer_rank;
  std::atomic<uint32_t> attached;    // producer: mapped this area and may write records
  std::atomic<uint32_t> want_space;  // producer: blocked on ring space or a staging chunk
  alignas(kCacheLine) std::atomic<uint32_t> slots[kSlotsPerPeer];  // see SlotState
};

constexpr size_t RoundUpToPage(size_t bytes) {
  return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
}

constexpr size_t kAreaControlBytes = RoundUpToPage(sizeof(AreaControl));

// One directed channel (producer -> owner) as either side sees it in its own mapping.
struct AreaView {
  AreaControl* control = nullptr;
  char* ring = nullptr;
  uint64_t ring_bytes = 0;
  char* staging = nullptr;
  uint64_t staging_bytes = 0;

  uint64_t chunk_bytes() const { return staging_bytes / kStagingChunks; }
  char* chunk(uint64_t index) const { return staging + (index % kStagingChunks) * chunk_bytes(); }

  // The view of an area that starts at `area` in some mapping, laid out per `header`.
  static AreaView At(char* area, const InboxHeader& header) {
    AreaView view;
    view.control = reinterpret_cast<AreaControl*>(area);
    view.ring = area + kAreaControlBytes;
    view.ring_bytes = header.ring_bytes;
    view.staging = view.ring + header.ring_bytes;
    view.staging_bytes = header.staging_bytes;
    return view;
  }
};

constexpr uint64_t AreaBytes(uint64_t ring_bytes, uint64_t staging_bytes) {
  return kAreaControlBytes + ring_bytes + staging_bytes;
}

// The owner's shared slots, after the areas of a mesh of `size`, and its buffer after them.
// Any change to SharedSlot's fields changes what peers read where and needs a new
// kLayoutVersion; this catches the ones that change its size (and so move the buffer).
static_assert(sizeof(SharedSlot) == 4352, "the shared slot layout changed: bump kLayoutVersion");
constexpr uint64_t kSharedBufferOffset = RoundUpToPage(SharedSlots::kDepth * sizeof(SharedSlot));
constexpr uint64_t kSharedSlotsBytes = kSharedBufferOffset + SharedSlots::kBufferBytes;
constexpr uint64_t SharedSlotsOffset(int size, uint64_t area_bytes) {
  return kPageBytes + static_cast<uint64_t>(size) * area_bytes;
}

}  // namespace chorus::shm

#endif  // CHORUS_TRANSPORT_SHM_LAYOUT_H_
