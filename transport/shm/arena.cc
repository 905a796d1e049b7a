#include "chorus/transport/shm/arena.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/env.h"
#include "chorus/core/status.h"

namespace chorus::shm {
namespace {

// The arena's first page: what a peer checks after opening it.
struct ArenaHeader {
  uint64_t magic;
  uint64_t nonce;
};

ABSL_CONST_INIT std::atomic<Arena*> g_arena{nullptr};

// A forked child starts without an arena: the parent's mapping is shared, not copied, so
// allocating from the inherited one would hand out the parent's memory again. Installed while
// the library loads. Creation takes no lock (racing creators publish with a compare-and-swap),
// so a fork while another thread creates one leaves the child nothing held.
const bool g_fork_handler_installed =
    pthread_atfork(nullptr, nullptr, [] { g_arena.store(nullptr, std::memory_order_relaxed); }) ==
    0;

}  // namespace

absl::StatusOr<Arena*> Arena::Get() {
  if (Arena* arena = IfCreated()) return arena;
  CHORUS_ASSIGN_OR_RETURN(const int64_t capacity,
                          GetEnvBytes("CHORUS_SHM_ARENA_BYTES", int64_t{16} << 30));
  if (capacity < static_cast<int64_t>(2 * kPageBytes) || capacity > (int64_t{1} << 44)) {
    return InvalidArgumentError(absl::StrCat("CHORUS_SHM_ARENA_BYTES is ", capacity,
                                             "; it must be between 8k and 16T bytes"));
  }
  const uint64_t bytes = RoundUpToPage(static_cast<uint64_t>(capacity));
  const int fd = memfd_create("chorus-arena", MFD_CLOEXEC);
  if (fd < 0) {
    return InternalError(
        absl::StrCat("shm: memfd_create for the arena failed: ", ErrnoText(errno)));
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int error = errno;
    close(fd);
    return InternalError(
        absl::StrCat("shm: sizing the arena to ", bytes,
                     " bytes (CHORUS_SHM_ARENA_BYTES) failed: ", ErrnoText(error)));
  }
  auto mapping = Mapping::Map(fd, 0, bytes, "the shared-memory arena");
  if (!mapping.ok()) {
    close(fd);
    return mapping.status();
  }
  // The winner is never destroyed: its memory may be in use until the process exits, and the
  // descriptor stays open so that peers can map it. A creator that lost the race to another
  // thread discards its own (address space only: no page was touched but the header's).
  Arena* created = new Arena(fd, std::move(mapping).value(), RandomNonce());
  Arena* existing = nullptr;
  if (!g_arena.compare_exchange_strong(existing, created, std::memory_order_acq_rel)) {
    delete created;
    return existing;
  }
  return created;
}

Arena* Arena::IfCreated() { return g_arena.load(std::memory_order_acquire); }

Arena::~Arena() { close(identity_.fd); }

Arena::Arena(int fd, std::unique_ptr<Mapping> mapping, uint64_t nonce)
    : mapping_(std::move(mapping)) {
  identity_.fd = fd;
  identity_.base = reinterpret_cast<uint64_t>(mapping_->data());
  identity_.bytes = mapping_->bytes();
  identity_.nonce = nonce;
  auto* header = reinterpret_cast<ArenaHeader*>(mapping_->data());
  header->magic = kArenaMagic;
  header->nonce = nonce;
  // The first page is the header; the rest is free.
  free_[kPageBytes] = identity_.bytes - kPageBytes;
}

absl::StatusOr<void*> Arena::Allocate(size_t bytes) {
  // Checked before rounding, which would wrap for sizes near SIZE_MAX.
  const uint64_t size = bytes > identity_.bytes ? 0 : RoundUpToPage(bytes == 0 ? 1 : bytes);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = free_.begin(); size != 0 && it != free_.end(); ++it) {
    if (it->second < size) continue;
    const uint64_t offset = it->first;
    const uint64_t left = it->second - size;
    free_.erase(it);
    if (left != 0) free_[offset + size] = left;
    allocated_[offset] = size;
    return static_cast<void*>(mapping_->data() + offset);
  }
  return InternalError(absl::StrCat("shm: the shared-memory arena has no free run of ", bytes,
                                    " bytes (capacity ", identity_.bytes,
                                    "); raise CHORUS_SHM_ARENA_BYTES or free buffers"));
}

absl::Status Arena::Free(void* data) {
  if (data == nullptr) return absl::OkStatus();
  const auto address = reinterpret_cast<uint64_t>(data);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = Contains(data, 1) ? allocated_.find(address - identity_.base) : allocated_.end();
  if (it == allocated_.end()) {
    return InvalidArgumentError(
        absl::StrCat("shm: ", absl::Hex(address),
                     " is not a buffer AllocateSharedMemory returned (or it "
                     "was freed already)"));
  }
  uint64_t offset = it->first;
  uint64_t size = it->second;
  allocated_.erase(it);
  // Coalesce with the free runs on either side.
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == offset + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second == offset) {
      offset = previous->first;
      size += previous->second;
      free_.erase(previous);
    }
  }
  free_[offset] = size;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Mapping>> MapPeerArena(pid_t pid, const Arena::Identity& identity,
                                                      int peer) {
  const std::string path = PeerDescriptorPath(pid, identity.fd);
  CHORUS_ASSIGN_OR_RETURN(
      const int fd, OpenPeerDescriptor(path, O_RDONLY, peer,
                                       absl::StrCat("the shared-memory arena of rank ", peer)));
  auto unusable = [&](absl::string_view why) {
    return PeerUnavailableError(absl::StrCat("shm: cannot map the shared-memory arena of rank ",
                                             peer, " (", path, "): ", why),
                                peer);
  };
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != identity.bytes) {
    close(fd);
    return unusable("the descriptor is not the arena the peer published");
  }
  auto mapping = Mapping::Map(fd, 0, identity.bytes, absl::StrCat("the arena of rank ", peer),
                              /*writable=*/false);
  close(fd);  // the mapping keeps the memfd alive
  if (!mapping.ok()) return mapping.status();
  const auto* header = reinterpret_cast<const ArenaHeader*>((*mapping)->data());
  if (header->magic != kArenaMagic || header->nonce != identity.nonce) {
    return unusable("the descriptor is not the arena the peer published");
  }
  return mapping;
}

}  // namespace chorus::shm
