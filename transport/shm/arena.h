// The process's shared-memory arena: host memory that the shm transport's peers in other
// processes map and read where it lies (AllocateSharedMemory in shm_device.h).
//
// A large message sent from a private buffer crosses through the staging area: the sender
// copies it in, the receiver copies (or reduces) it out. Sent from the arena, it is announced
// as usual and the receiver reads it in place through its own mapping of the sender's arena,
// so no byte goes through the staging area: one pass fewer per side, and a receive with a sink
// (a reduction) reads the sender's buffer directly.
//
// The arena is one memfd of fixed capacity (address space only: pages are allocated as they
// are touched), created on first use. Its first page holds a magic word and a random nonce, so
// a peer that opens it through /proc/<pid>/fd checks it got the right file. Allocations are
// page-aligned; freed space is reused (first fit, coalesced). A forked child starts an arena of
// its own (its parent's buffers stay mapped in it, shared), also when another thread of the
// parent was creating one at the time of the fork.
#ifndef CHORUS_TRANSPORT_SHM_ARENA_H_
#define CHORUS_TRANSPORT_SHM_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "chorus/transport/shm/segment.h"

namespace chorus::shm {

constexpr uint64_t kArenaMagic = 0x414E455241524F48ull;  // arbitrary; marks a Chorus arena

// Whether [start, start + length) lies inside [base, base + bytes), without overflow.
inline bool RangeInside(uint64_t base, uint64_t bytes, uint64_t start, uint64_t length) {
  return start >= base && length <= bytes && start - base <= bytes - length;
}

// Thread-safe.
class Arena {
 public:
  // What a peer needs to map the arena and check it: published in the owner's inbox header.
  struct Identity {
    int fd = -1;
    uint64_t base = 0;   // the arena's address in the owner's process
    uint64_t bytes = 0;  // its capacity
    uint64_t nonce = 0;  // also stored after the magic word in its first page
  };

  // The process's arena, created on first call with CHORUS_SHM_ARENA_BYTES of capacity.
  static absl::StatusOr<Arena*> Get();
  // The arena if it exists already (one atomic load), else null.
  static Arena* IfCreated();

  absl::StatusOr<void*> Allocate(size_t bytes);
  // kInvalidArgument for a pointer Allocate did not return (or returned and was freed since).
  absl::Status Free(void* data);

  // Whether [data, data + bytes) lies inside the arena (allocated or not).
  bool Contains(const void* data, size_t bytes) const {
    return RangeInside(identity_.base, identity_.bytes, reinterpret_cast<uintptr_t>(data), bytes);
  }
  const Identity& identity() const { return identity_; }

 private:
  Arena(int fd, std::unique_ptr<Mapping> mapping, uint64_t nonce);
  // Only a creation that lost the race to another thread's destroys its arena (Get).
  ~Arena();

  const std::unique_ptr<Mapping> mapping_;
  Identity identity_;
  std::mutex mu_;
  std::map<uint64_t, uint64_t> free_ ABSL_GUARDED_BY(mu_);       // offset -> bytes
  std::map<uint64_t, uint64_t> allocated_ ABSL_GUARDED_BY(mu_);  // offset -> bytes
};

// A read-only mapping of a peer's arena, checked against the identity it published.
// kPeerUnavailable naming `peer` when it cannot be opened or is not what was published.
absl::StatusOr<std::unique_ptr<Mapping>> MapPeerArena(pid_t pid, const Arena::Identity& identity,
                                                      int peer);

}  // namespace chorus::shm

#endif  // CHORUS_TRANSPORT_SHM_ARENA_H_
