// Inbox segments: creating this rank's, attaching to a peer's, and the address that names one.
//
// Segments are memfds, so they never appear in /dev/shm and the kernel frees them when the last
// mapping and descriptor are gone, however the processes ended. A peer process opens the
// owner's descriptor as /proc/<owner pid>/fd/<fd>: this needs no privilege, only the access
// ptrace's "read" mode grants (same user, dumpable process; Yama's ptrace_scope does not
// restrict it). Ranks that are threads of one process share the owner's mapping instead.
#ifndef CHORUS_TRANSPORT_SHM_SEGMENT_H_
#define CHORUS_TRANSPORT_SHM_SEGMENT_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chorus/transport/shm/layout.h"

namespace chorus::shm {

// "No such file or directory (errno 2)".
std::string ErrnoText(int error);
// A random non-zero word: names segments in addresses and registries.
uint64_t RandomNonce();

// A shared mapping, unmapped on destruction. Immutable; thread-safe.
class Mapping {
 public:
  // Maps `bytes` of `fd` at `offset`, read-write unless `writable` is false; `what` names it
  // in errors.
  static absl::StatusOr<std::unique_ptr<Mapping>> Map(int fd, uint64_t offset, uint64_t bytes,
                                                      absl::string_view what, bool writable = true);
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  char* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }

 private:
  Mapping(char* data, uint64_t bytes) : data_(data), bytes_(bytes) {}
  char* const data_;
  const uint64_t bytes_;
};

// Where an inbox is, as published through the store:
// "shm1:<host identity>:<pid>:<fd>:<nonce hex>".
struct InboxAddress {
  std::string host;  // LocalHostIdentity() of the owner
  pid_t pid = 0;
  int fd = -1;
  uint64_t nonce = 0;

  std::string ToString() const;
  static absl::StatusOr<InboxAddress> Parse(absl::string_view text);
};

// "/proc/<pid>/fd/<fd>": where another process's descriptor is opened.
std::string PeerDescriptorPath(pid_t pid, int fd);
// Opens `path` (a PeerDescriptorPath) with `flags` plus O_CLOEXEC, which needs ptrace's read
// access to its process (same user, dumpable). kPeerUnavailable naming `peer` when it cannot: a
// refusal says what the ranks must share, any other failure that the process or its descriptor
// is gone. `what` names the descriptor in errors.
absl::StatusOr<int> OpenPeerDescriptor(const std::string& path, int flags, int peer,
                                       absl::string_view what);

// This rank's inbox. The identity block of the header is written at creation; the rest is
// shared state. Thread-safe.
class Inbox {
 public:
  struct Params {
    uint64_t ring_bytes;     // power of two, multiple of the page
    uint64_t staging_bytes;  // multiple of kStagingChunks pages
  };

  static absl::StatusOr<std::shared_ptr<Inbox>> Create(int rank, int size, const Params& params);
  ~Inbox();
  Inbox(const Inbox&) = delete;
  Inbox& operator=(const Inbox&) = delete;

  InboxHeader& header() const { return *reinterpret_cast<InboxHeader*>(mapping_->data()); }
  // The area that rank `peer` writes.
  AreaView area(int peer) const;
  // This rank's shared slots (SharedSlots::kDepth of them).
  SharedSlot* shared_slots() const;
  InboxAddress address() const;

  // Stops new attachments: closes the descriptor peers open through /proc and removes this
  // inbox from the in-process registry. Peers already attached keep their mappings.
  void CloseForAttach();

 private:
  friend class PeerInbox;
  Inbox(int fd, std::unique_ptr<Mapping> mapping, uint64_t nonce);
  // The inbox with `nonce` if it lives in this process and is still open for attach.
  static std::shared_ptr<Inbox> FindInProcess(uint64_t nonce);

  int fd_;
  const std::unique_ptr<Mapping> mapping_;
  const uint64_t nonce_;  // also the probe word peers read with process_vm_readv
};

// The part of a peer's inbox this rank uses: the header page and this rank's area in it, which
// it writes, and the peer's shared slots, which it reads. Immutable after Attach; thread-safe.
class PeerInbox {
 public:
  // Maps the inbox at `address`, which must belong to rank `peer` of a mesh of `size`, and
  // returns this rank's (`my_rank`) view of it. kPeerUnavailable naming the peer when the
  // owner is gone or its inbox is not what the address promised.
  static absl::StatusOr<std::unique_ptr<PeerInbox>> Attach(const InboxAddress& address, int peer,
                                                           int my_rank, int size);

  InboxHeader& header() const { return *header_; }
  const AreaView& area() const { return area_; }
  SharedSlot* shared_slots() const { return shared_slots_; }

 private:
  PeerInbox() = default;
  std::shared_ptr<Inbox> same_process_;  // the owner's own mapping, for a peer in this process
  std::unique_ptr<Mapping> header_mapping_;
  std::unique_ptr<Mapping> area_mapping_;
  std::unique_ptr<Mapping> slots_mapping_;
  InboxHeader* header_ = nullptr;
  AreaView area_;
  SharedSlot* shared_slots_ = nullptr;
};

}  // namespace chorus::shm

#endif  // CHORUS_TRANSPORT_SHM_SEGMENT_H_
