#include "chorus/transport/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "chorus/core/host_identity.h"
#include "chorus/core/status.h"

namespace chorus::shm {

std::string ErrnoText(int error) {
  return absl::StrCat(std::strerror(error), " (errno ", error, ")");
}

std::string PeerDescriptorPath(pid_t pid, int fd) {
  return absl::StrCat("/proc/", pid, "/fd/", fd);
}

absl::StatusOr<int> OpenPeerDescriptor(const std::string& path, int flags, int peer,
                                       absl::string_view what) {
  const int opened = open(path.c_str(), flags | O_CLOEXEC);
  if (opened >= 0) return opened;
  const int error = errno;
  if (error == EACCES || error == EPERM) {
    return PeerUnavailableError(
        absl::StrCat("shm: opening ", path, " (", what, ") was refused: ", ErrnoText(error),
                     "; ranks must run as the same user and be dumpable (no PR_SET_DUMPABLE 0, "
                     "no setuid); use the tcp transport otherwise"),
        peer);
  }
  return PeerUnavailableError(
      absl::StrCat("shm: opening ", path, " (", what, ") failed: ", ErrnoText(error),
                   "; the peer has exited or closed the descriptor, or is not in this job"),
      peer);
}

uint64_t RandomNonce() {
  uint64_t value = 0;
  while (value == 0) {
    if (getrandom(&value, sizeof(value), 0) != sizeof(value)) value = 0;
  }
  return value;
}

namespace {

// Inboxes of this process by nonce, so that a rank thread reaches a peer thread's inbox through
// the owner's own mapping (one address for both sides, which also keeps ThreadSanitizer's view
// of the shared atomics exact).
struct Registry {
  std::mutex mu;
  absl::flat_hash_map<uint64_t, std::weak_ptr<Inbox>> inboxes ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* registry = new Registry;
  return *registry;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Mapping>> Mapping::Map(int fd, uint64_t offset, uint64_t bytes,
                                                      absl::string_view what, bool writable) {
  void* data = mmap(nullptr, bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd,
                    static_cast<off_t>(offset));
  if (data == MAP_FAILED) {
    return InternalError(absl::StrCat("shm: mmap of ", bytes, " bytes of ", what,
                                      " failed: ", ErrnoText(errno)));
  }
  return std::unique_ptr<Mapping>(new Mapping(static_cast<char*>(data), bytes));
}

Mapping::~Mapping() { munmap(data_, bytes_); }

std::string InboxAddress::ToString() const {
  return absl::StrCat("shm1:", host, ":", pid, ":", fd, ":", absl::Hex(nonce));
}

absl::StatusOr<InboxAddress> InboxAddress::Parse(absl::string_view text) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  InboxAddress address;
  int64_t pid = 0;
  if (parts.size() != 5 || parts[0] != "shm1" || !absl::SimpleAtoi(parts[2], &pid) ||
      pid <= 0 || !absl::SimpleAtoi(parts[3], &address.fd) || address.fd < 0 ||
      !absl::SimpleHexAtoi(parts[4], &address.nonce)) {
    return InvalidArgumentError(absl::StrCat(
        "shm: '", text, "' is not a shared-memory address (shm1:<host>:<pid>:<fd>:<nonce>); "
        "were the ranks of this mesh created with different transports?"));
  }
  address.host = std::string(parts[1]);
  address.pid = static_cast<pid_t>(pid);
  return address;
}

Inbox::Inbox(int fd, std::unique_ptr<Mapping> mapping, uint64_t nonce)
    : fd_(fd), mapping_(std::move(mapping)), nonce_(nonce) {}

absl::StatusOr<std::shared_ptr<Inbox>> Inbox::Create(int rank, int size, const Params& params) {
  const uint64_t area_bytes = AreaBytes(params.ring_bytes, params.staging_bytes);
  const uint64_t total = SharedSlotsOffset(size, area_bytes) + kSharedSlotsBytes;
  const std::string name = absl::StrCat("chorus-shm-r", rank);
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) {
    return InternalError(absl::StrCat("shm: memfd_create for rank ", rank,
                                      "'s inbox failed: ", ErrnoText(errno)));
  }
  if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
    const int error = errno;
    close(fd);
    return InternalError(absl::StrCat("shm: sizing rank ", rank, "'s inbox to ", total,
                                      " bytes failed: ", ErrnoText(error)));
  }
  auto mapping = Mapping::Map(fd, 0, total, absl::StrCat("rank ", rank, "'s inbox"));
  if (!mapping.ok()) {
    close(fd);
    return mapping.status();
  }
  const uint64_t nonce = RandomNonce();
  std::shared_ptr<Inbox> inbox(new Inbox(fd, std::move(mapping).value(), nonce));
  // The memfd is zero-filled: every atomic in the areas starts as 0, a valid initial state.
  InboxHeader* header = new (inbox->mapping_->data()) InboxHeader();
  header->version = kLayoutVersion;
  header->rank = rank;
  header->size = size;
  header->owner_pid = getpid();
  header->nonce = nonce;
  header->ring_bytes = params.ring_bytes;
  header->staging_bytes = params.staging_bytes;
  header->area_bytes = area_bytes;
  header->probe_address = reinterpret_cast<uint64_t>(&inbox->nonce_);
  header->probe_value = nonce;
  // Peers read the header only after they learn the address through the store, which orders
  // these writes before their reads.
  header->magic = kInboxMagic;
  {
    Registry& registry = GetRegistry();
    std::lock_guard<std::mutex> lock(registry.mu);
    registry.inboxes[nonce] = inbox;
  }
  return inbox;
}

Inbox::~Inbox() { CloseForAttach(); }

void Inbox::CloseForAttach() {
  {
    Registry& registry = GetRegistry();
    std::lock_guard<std::mutex> lock(registry.mu);
    registry.inboxes.erase(nonce_);
  }
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
}

std::shared_ptr<Inbox> Inbox::FindInProcess(uint64_t nonce) {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  auto it = registry.inboxes.find(nonce);
  return it == registry.inboxes.end() ? nullptr : it->second.lock();
}

AreaView Inbox::area(int peer) const {
  const InboxHeader& h = header();
  return AreaView::At(mapping_->data() + kPageBytes + static_cast<uint64_t>(peer) * h.area_bytes,
                      h);
}

SharedSlot* Inbox::shared_slots() const {
  const InboxHeader& h = header();
  return reinterpret_cast<SharedSlot*>(mapping_->data() + SharedSlotsOffset(h.size, h.area_bytes));
}

InboxAddress Inbox::address() const {
  InboxAddress address;
  address.host = LocalHostIdentity();
  address.pid = header().owner_pid;
  address.fd = fd_;
  address.nonce = nonce_;
  return address;
}

absl::StatusOr<std::unique_ptr<PeerInbox>> PeerInbox::Attach(const InboxAddress& address,
                                                             int peer, int my_rank, int size) {
  const std::string who = absl::StrCat("rank ", peer, " (pid ", address.pid, ")");
  auto gone = [&](absl::string_view why) {
    return PeerUnavailableError(
        absl::StrCat("shm: cannot attach to the inbox of ", who, ": ", why,
                     "; the peer has exited or closed its mesh, or is not in this job"),
        peer);
  };
  std::unique_ptr<PeerInbox> view(new PeerInbox);
  if (address.pid == getpid()) {
    view->same_process_ = Inbox::FindInProcess(address.nonce);
    if (view->same_process_ == nullptr) return gone("no open inbox with its nonce in this process");
    view->header_ = &view->same_process_->header();
    view->area_ = view->same_process_->area(my_rank);
    view->shared_slots_ = view->same_process_->shared_slots();
    return view;
  }

  const std::string path = PeerDescriptorPath(address.pid, address.fd);
  CHORUS_ASSIGN_OR_RETURN(
      const int fd, OpenPeerDescriptor(path, O_RDWR, peer, absl::StrCat("the inbox of ", who)));
  struct stat st;
  const bool stat_ok = fstat(fd, &st) == 0;
  auto header_mapping =
      stat_ok && static_cast<uint64_t>(st.st_size) >= kPageBytes
          ? Mapping::Map(fd, 0, kPageBytes, absl::StrCat("the inbox header of ", who))
          : absl::StatusOr<std::unique_ptr<Mapping>>(gone("its descriptor is not an inbox"));
  if (!header_mapping.ok()) {
    close(fd);
    return header_mapping.status();
  }
  const InboxHeader& h = *reinterpret_cast<const InboxHeader*>((*header_mapping)->data());
  const uint64_t slots_offset = SharedSlotsOffset(size, AreaBytes(h.ring_bytes, h.staging_bytes));
  const uint64_t expected_bytes = slots_offset + kSharedSlotsBytes;
  if (h.magic != kInboxMagic || h.version != kLayoutVersion || h.nonce != address.nonce ||
      h.rank != peer || h.size != size || h.owner_pid != address.pid ||
      h.area_bytes != AreaBytes(h.ring_bytes, h.staging_bytes) ||
      static_cast<uint64_t>(st.st_size) != expected_bytes) {
    close(fd);
    return gone(absl::StrCat("the segment behind ", path,
                             " is not the inbox its address names (stale descriptor, another "
                             "job, or a different Chorus version)"));
  }
  auto area_mapping =
      Mapping::Map(fd, kPageBytes + static_cast<uint64_t>(my_rank) * h.area_bytes, h.area_bytes,
                   absl::StrCat("this rank's area in the inbox of ", who));
  auto slots_mapping = area_mapping.ok() ? Mapping::Map(fd, slots_offset, kSharedSlotsBytes,
                                                        absl::StrCat("the slots of ", who))
                                         : area_mapping.status();
  close(fd);  // the mappings keep the memfd alive
  if (!slots_mapping.ok()) return slots_mapping.status();
  view->header_mapping_ = std::move(header_mapping).value();
  view->area_mapping_ = std::move(area_mapping).value();
  view->slots_mapping_ = std::move(slots_mapping).value();
  view->header_ = reinterpret_cast<InboxHeader*>(view->header_mapping_->data());
  view->area_ = AreaView::At(view->area_mapping_->data(), *view->header_);
  view->shared_slots_ = reinterpret_cast<SharedSlot*>(view->slots_mapping_->data());
  return view;
}

}  // namespace chorus::shm
