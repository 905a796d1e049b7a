#include "chorus/transport/ibverbs/unmap_monitor.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"

namespace chorus::ibverbs {
namespace {

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

constexpr uint64_t kUnmapEvents =
    UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;

uintptr_t PageSize() {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return page;
}

struct OpenedFd {
  int fd = -1;
  bool user_mode_only = false;
};

// A userfaultfd that sees all faults if this process may have one, else one that sees only
// user-mode faults (what an unprivileged process gets where vm.unprivileged_userfaultfd is 0).
absl::StatusOr<OpenedFd> OpenUserfaultfd() {
  const int flags = O_CLOEXEC | O_NONBLOCK;  // poll() reports an error on a blocking one
  int fd = static_cast<int>(syscall(SYS_userfaultfd, flags));
  if (fd >= 0) return OpenedFd{fd, false};
  const int syscall_error = errno;
  if (syscall_error == ENOSYS) {
    return InternalError("the kernel has no userfaultfd (CONFIG_USERFAULTFD)");
  }
#ifdef USERFAULTFD_IOC_NEW
  // Access to /dev/userfaultfd is granted by its file mode rather than by the sysctl.
  const int device = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
  if (device >= 0) {
    fd = ioctl(device, USERFAULTFD_IOC_NEW, flags);
    close(device);
    if (fd >= 0) return OpenedFd{fd, false};
  }
#endif
  fd = static_cast<int>(syscall(SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY));
  if (fd >= 0) return OpenedFd{fd, true};
  return InternalError(
      absl::StrCat("userfaultfd is not permitted here: ", std::strerror(syscall_error),
                   " (see /proc/sys/vm/unprivileged_userfaultfd and the mode of "
                   "/dev/userfaultfd)"));
}

// The optional features this kernel offers, found on a userfaultfd of its own: UFFDIO_API can
// be issued only once per descriptor.
absl::StatusOr<uint64_t> SupportedFeatures() {
  CHORUS_ASSIGN_OR_RETURN(const OpenedFd probe, OpenUserfaultfd());
  uffdio_api api{};
  api.api = UFFD_API;
  const int result = ioctl(probe.fd, UFFDIO_API, &api);
  const int error = errno;
  close(probe.fd);
  if (result != 0) {
    return InternalError(absl::StrCat("userfaultfd UFFDIO_API: ", std::strerror(error)));
  }
  return static_cast<uint64_t>(api.features);
}

std::string RegisterErrorText(int error) {
  switch (error) {
    case EINVAL:
      return "the kernel cannot watch memory of this kind (file-backed, device, hugetlb or "
             "shared memory)";
    case EBUSY:
      return "another userfaultfd watches this memory";
    case ENOMEM:
      return "the range is not entirely mapped";
    default:
      return std::strerror(error);
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<UnmapMonitor>> UnmapMonitor::Create(const Options& options) {
  CHORUS_ASSIGN_OR_RETURN(const uint64_t supported, SupportedFeatures());
  if ((supported & kUnmapEvents) != kUnmapEvents) {
    return InternalError("the kernel's userfaultfd does not report unmapping (Linux 4.11+)");
  }
  CHORUS_ASSIGN_OR_RETURN(const OpenedFd opened, OpenUserfaultfd());
  uffdio_api api{};
  api.api = UFFD_API;
  // Write-protect registration of shared memory needs this feature; without it such memory is
  // refused by Watch and so not cached.
  api.features = kUnmapEvents | (supported & UFFD_FEATURE_WP_HUGETLBFS_SHMEM);
  if (ioctl(opened.fd, UFFDIO_API, &api) != 0) {
    const int error = errno;
    close(opened.fd);
    return InternalError(absl::StrCat("userfaultfd UFFDIO_API: ", std::strerror(error)));
  }
  const int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    const int error = errno;
    close(opened.fd);
    return InternalError(absl::StrCat("eventfd: ", std::strerror(error)));
  }
  std::shared_ptr<UnmapMonitor> monitor(
      new UnmapMonitor(opened.fd, wake_fd, opened.user_mode_only));
  monitor->thread_ = std::thread([raw = monitor.get()] { raw->Run(); });
  // Running before anything is watched, so that the first unmap does not wait for the thread
  // to start, and before the probe page is unmapped, should it stay registered.
  while (!monitor->running_.load(std::memory_order_acquire)) std::this_thread::yield();
  CHORUS_RETURN_IF_ERROR(monitor->ChooseMode(options));
  return monitor;
}

absl::StatusOr<std::shared_ptr<UnmapMonitor>> UnmapMonitor::ForProcess() {
  struct Shared {
    std::mutex mu;
    std::weak_ptr<UnmapMonitor> monitor;
  };
  static Shared* const shared = new Shared;
  std::lock_guard<std::mutex> lock(shared->mu);
  std::shared_ptr<UnmapMonitor> monitor = shared->monitor.lock();
  if (monitor != nullptr && monitor->pid_ == getpid()) return monitor;
  CHORUS_ASSIGN_OR_RETURN(monitor, Create(Options()));
  shared->monitor = monitor;
  return monitor;
}

UnmapMonitor::UnmapMonitor(int uffd, int wake_fd, bool user_mode_only)
    : uffd_(uffd), wake_fd_(wake_fd), user_mode_only_(user_mode_only), pid_(getpid()) {}

UnmapMonitor::~UnmapMonitor() {
  if (getpid() != pid_) {
    // A forked child's copy: the thread is the parent's, and so is the eventfd's counter, so
    // waking it would stop the parent's monitor. The handle is let go without a join.
    static_cast<void>(new std::thread(std::move(thread_)));
  } else if (thread_.joinable()) {
    const uint64_t one = 1;
    while (write(wake_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  // Closing the userfaultfd unregisters every range and releases any unmap waiting on an event.
  close(uffd_);
  close(wake_fd_);
}

absl::Status UnmapMonitor::ChooseMode(const Options& options) {
  const uintptr_t page = PageSize();
  void* probe = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (probe == MAP_FAILED) return InternalError(absl::StrCat("mmap: ", std::strerror(errno)));
  const uintptr_t start = reinterpret_cast<uintptr_t>(probe);
  uffdio_register reg{};
  reg.range.start = start;
  reg.range.len = page;
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  write_protect_mode_ =
      options.allow_write_protect_mode && ioctl(uffd_, UFFDIO_REGISTER, &reg) == 0;
  int missing_error = 0;
  if (!write_protect_mode_) {
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    if (ioctl(uffd_, UFFDIO_REGISTER, &reg) != 0) missing_error = errno;
  }
  const uffdio_range range{start, page};
  if (missing_error == 0) ioctl(uffd_, UFFDIO_UNREGISTER, &range);
  munmap(probe, page);
  if (write_protect_mode_) return absl::OkStatus();
  if (missing_error != 0) {
    return InternalError(
        absl::StrCat("userfaultfd cannot watch anonymous memory: ", std::strerror(missing_error)));
  }
  if (user_mode_only_) {
    return InternalError(
        "userfaultfd sees only user-mode faults here and the kernel cannot watch in "
        "write-protect mode; in missing-page mode a kernel access to a dropped page (read(2), a "
        "memory registration) would fail");
  }
  return absl::OkStatus();
}

void UnmapMonitor::Run() {
  pollfd fds[2] = {{uffd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  uffd_msg messages[32];
  running_.store(true, std::memory_order_release);
  for (;;) {
    if (poll(fds, 2, -1) < 0) continue;  // EINTR
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    // Odd from before the read until what it returned is in the log: the read is what lets an
    // unmapping call return, so ReadUnmapped() waits for an odd value to pass.
    busy_.fetch_add(1, std::memory_order_seq_cst);
    const ssize_t got = read(uffd_, messages, sizeof(messages));
    const size_t count = got > 0 ? static_cast<size_t>(got) / sizeof(uffd_msg) : 0;
    for (size_t i = 0; i < count; ++i) {
      const uffd_msg& message = messages[i];
      switch (message.event) {
        case UFFD_EVENT_UNMAP:
        case UFFD_EVENT_REMOVE:
          Append(message.arg.remove.start, message.arg.remove.end - message.arg.remove.start);
          break;
        case UFFD_EVENT_REMAP:
          // The pages moved to arg.remap.to, which stays registered: harmless, since nothing
          // is looked up there until a new Watch, and its events are reported like any other.
          Append(message.arg.remap.from, message.arg.remap.len);
          break;
        case UFFD_EVENT_PAGEFAULT:
          HandleFault(message.arg.pagefault.address, message.arg.pagefault.flags);
          break;
        default:
          break;
      }
    }
    busy_.fetch_add(1, std::memory_order_seq_cst);
    if ((fds[0].revents & (POLLERR | POLLNVAL)) != 0 && count == 0) {
      // Not expected of an open, non-blocking userfaultfd; do not spin on it.
      usleep(10000);
    }
  }
}

void UnmapMonitor::HandleFault(uint64_t address, uint64_t flags) {
  // Resolved here and at once, never through a reader: the faulting thread may hold anything.
  const uint64_t page = address & ~static_cast<uint64_t>(PageSize() - 1);
  if ((flags & UFFD_PAGEFAULT_FLAG_WP) != 0) {
    // Nothing is write-protected by this monitor; lift whatever is, which also wakes the thread.
    uffdio_writeprotect unprotect{};
    unprotect.range = {page, PageSize()};
    unprotect.mode = 0;
    if (ioctl(uffd_, UFFDIO_WRITEPROTECT, &unprotect) == 0) return;
  } else {
    // A page of a watched range that is not present: what the kernel would have given it.
    uffdio_zeropage zero{};
    zero.range = {page, PageSize()};
    zero.mode = 0;
    if (ioctl(uffd_, UFFDIO_ZEROPAGE, &zero) == 0) return;
  }
  // EEXIST (another fault mapped it), EAGAIN (the mapping is changing and its event is queued),
  // ENOENT (unmapped): the thread faults again, and finds the page or reports a new fault.
  uffdio_range range{page, PageSize()};
  ioctl(uffd_, UFFDIO_WAKE, &range);
}

void UnmapMonitor::Append(uint64_t start, uint64_t bytes) {
  // Only this thread writes the log. A reader that reads a slot while it is rewritten sees `seq`
  // change: the release stores order the zeroing of `seq` before the new values.
  const uint64_t index = log_end_.load(std::memory_order_relaxed);
  Slot& slot = log_[index % kLogSlots];
  slot.seq.store(0, std::memory_order_relaxed);
  slot.start.store(start, std::memory_order_release);
  slot.bytes.store(bytes, std::memory_order_release);
  slot.seq.store(index + 1, std::memory_order_release);
  log_end_.store(index + 1, std::memory_order_release);
}

uint64_t UnmapMonitor::LogEnd() const { return log_end_.load(std::memory_order_acquire); }

bool UnmapMonitor::ReadUnmapped(uint64_t* position,
                                absl::FunctionRef<void(uintptr_t, size_t)> visit) {
  const uint64_t busy = busy_.load(std::memory_order_seq_cst);
  if (busy % 2 != 0) {
    // The thread has read events it has not logged yet. It takes no lock and allocates nothing,
    // so it finishes whatever this thread holds.
    while (busy_.load(std::memory_order_acquire) == busy) std::this_thread::yield();
  }
  const uint64_t end = log_end_.load(std::memory_order_acquire);
  if (end - *position > kLogSlots) {
    *position = end;
    return false;
  }
  for (uint64_t index = *position; index < end; ++index) {
    const Slot& slot = log_[index % kLogSlots];
    const uint64_t seq_before = slot.seq.load(std::memory_order_acquire);
    const uint64_t start = slot.start.load(std::memory_order_acquire);
    const uint64_t bytes = slot.bytes.load(std::memory_order_acquire);
    const uint64_t seq_after = slot.seq.load(std::memory_order_relaxed);
    if (seq_before != index + 1 || seq_after != index + 1) {
      // Overwritten while this reader was behind.
      *position = log_end_.load(std::memory_order_acquire);
      return false;
    }
    visit(static_cast<uintptr_t>(start), static_cast<size_t>(bytes));
  }
  *position = end;
  return true;
}

absl::Status UnmapMonitor::Watch(uintptr_t start, size_t bytes) {
  const uintptr_t page = PageSize();
  if (bytes == 0 || start % page != 0 || bytes % page != 0 || start + bytes < start) {
    return InvalidArgumentError("UnmapMonitor::Watch: the range must be whole pages");
  }
  const uintptr_t end = start + bytes;
  if (!write_protect_mode_) {
    // Present pages do not fault, so registering them afterwards does not go through this
    // monitor's thread page by page. Best effort: the fault path is correct too.
    madvise(reinterpret_cast<void*>(start), bytes, MADV_POPULATE_READ);
  }
  std::lock_guard<std::mutex> lock(watch_mu_);
  CHORUS_RETURN_IF_ERROR(Register(start, end));
  SplitSpanAt(start);
  SplitSpanAt(end);
  uintptr_t cursor = start;
  auto it = spans_.lower_bound(start);
  while (cursor < end) {
    if (it != spans_.end() && it->first == cursor) {
      ++it->second.count;
      cursor = it->second.end;
      ++it;
    } else {
      const uintptr_t gap_end = it == spans_.end() ? end : std::min(end, it->first);
      it = std::next(spans_.emplace_hint(it, cursor, Span{gap_end, 1}));
      cursor = gap_end;
    }
  }
  return absl::OkStatus();
}

void UnmapMonitor::Unwatch(uintptr_t start, size_t bytes) {
  const uintptr_t page = PageSize();
  if (bytes == 0 || start % page != 0 || bytes % page != 0 || start + bytes < start) return;
  const uintptr_t end = start + bytes;
  std::lock_guard<std::mutex> lock(watch_mu_);
  SplitSpanAt(start);
  SplitSpanAt(end);
  std::vector<std::pair<uintptr_t, uintptr_t>> unwatched;
  for (auto it = spans_.lower_bound(start); it != spans_.end() && it->first < end;) {
    if (--it->second.count > 0) {
      ++it;
      continue;
    }
    if (!unwatched.empty() && unwatched.back().second == it->first) {
      unwatched.back().second = it->second.end;
    } else {
      unwatched.emplace_back(it->first, it->second.end);
    }
    it = spans_.erase(it);
  }
  for (const auto& [from, to] : unwatched) Unregister(from, to);
}

absl::Status UnmapMonitor::Register(uintptr_t start, uintptr_t end) {
  uffdio_register reg{};
  reg.range.start = start;
  reg.range.len = end - start;
  reg.mode = write_protect_mode_ ? UFFDIO_REGISTER_MODE_WP : UFFDIO_REGISTER_MODE_MISSING;
  std::string error;
  if (ioctl(uffd_, UFFDIO_REGISTER, &reg) != 0) {
    error = RegisterErrorText(errno);
  } else if (msync(reinterpret_cast<void*>(start), end - start, MS_ASYNC) != 0 && errno == ENOMEM) {
    // The kernel registers the mapped parts of a range with holes; a mapping made in a hole
    // later would not be watched.
    error = RegisterErrorText(ENOMEM);
  } else if (!write_protect_mode_ && (reg.ioctls & (uint64_t{1} << _UFFDIO_ZEROPAGE)) == 0) {
    error = "faults there cannot be resolved with zero pages (hugetlb memory)";
  }
  if (error.empty()) return absl::OkStatus();
  // A registration that failed part way may have registered some of the range: undo that
  // where no earlier Watch needs it.
  auto it = spans_.upper_bound(start);
  if (it != spans_.begin() && std::prev(it)->second.end > start) --it;
  for (uintptr_t cursor = start; cursor < end; ++it) {
    const uintptr_t held_from = it == spans_.end() ? end : std::min(end, it->first);
    if (cursor < held_from) Unregister(cursor, held_from);
    if (it == spans_.end()) break;
    cursor = std::max(cursor, it->second.end);
  }
  return InvalidArgumentError(absl::StrCat("cannot watch for unmapping: ", error));
}

void UnmapMonitor::Unregister(uintptr_t start, uintptr_t end) {
  uffdio_range range{start, end - start};
  // Fails harmlessly where the memory is gone, or was replaced by memory never registered.
  ioctl(uffd_, UFFDIO_UNREGISTER, &range);
}

void UnmapMonitor::SplitSpanAt(uintptr_t address) {
  auto it = spans_.upper_bound(address);
  if (it == spans_.begin()) return;
  --it;
  if (it->first < address && it->second.end > address) {
    spans_.emplace_hint(std::next(it), address, Span{it->second.end, it->second.count});
    it->second.end = address;
  }
}

}  // namespace chorus::ibverbs
