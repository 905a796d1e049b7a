#include "chorus/transport/ibverbs/unmap_monitor.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"

namespace chorus::ibverbs {
namespace {

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

uintptr_t PageSize() {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

PageRange CoveringPages(const void* address, size_t bytes) {
  const uintptr_t page = PageSize();
  const uintptr_t start = reinterpret_cast<uintptr_t>(address);
  PageRange range;
  range.start = start & ~(page - 1);
  range.end = (start + (bytes == 0 ? 1 : bytes) + page - 1) & ~(page - 1);
  return range;
}

absl::StatusOr<std::unique_ptr<UnmapMonitor>> UnmapMonitor::Create(std::mutex& guard,
                                                                   OnUnmap on_unmap) {
  std::unique_ptr<UnmapMonitor> monitor(new UnmapMonitor(guard, std::move(on_unmap)));
  int fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd < 0 && errno == EPERM) {
    // Unprivileged processes may watch faults of user code only; enough here: the events this
    // monitor wants do not depend on who faults.
    fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
  }
  if (fd < 0) {
    return InternalError(absl::StrCat("userfaultfd: ", std::strerror(errno),
                                      " (see /proc/sys/vm/unprivileged_userfaultfd)"));
  }
  monitor->uffd_ = ScopedFd(fd);
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;
  if (ioctl(fd, UFFDIO_API, &api) != 0) {
    return InternalError(absl::StrCat("userfaultfd UFFDIO_API: ", std::strerror(errno)));
  }
  monitor->wake_ = ScopedFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!monitor->wake_.valid()) {
    return InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  monitor->thread_ = std::thread([raw = monitor.get()] { raw->Run(); });
  return monitor;
}

UnmapMonitor::~UnmapMonitor() {
  stopping_.store(true);
  const uint64_t one = 1;
  ssize_t written = write(wake_.get(), &one, sizeof(one));
  (void)written;  // the thread also polls with a timeout
  if (thread_.joinable()) thread_.join();
}

absl::Status UnmapMonitor::Watch(uintptr_t start, size_t bytes) {
  uffdio_register reg{};
  reg.range.start = start;
  reg.range.len = bytes;
  reg.mode = UFFDIO_REGISTER_MODE_MISSING;
  if (ioctl(uffd_.get(), UFFDIO_REGISTER, &reg) != 0) {
    return InternalError(
        absl::StrCat("userfaultfd cannot watch this memory: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void UnmapMonitor::Unwatch(uintptr_t start, size_t bytes) {
  uffdio_range range{};
  range.start = start;
  range.len = bytes;
  ioctl(uffd_.get(), UFFDIO_UNREGISTER, &range);  // fails harmlessly for ranges already gone
}

bool UnmapMonitor::DrainEvents() {
  std::lock_guard<std::mutex> lock(guard_);
  uffd_msg messages[16];
  for (;;) {
    const ssize_t got = read(uffd_.get(), messages, sizeof(messages));
    if (got < 0) return errno == EAGAIN || errno == EINTR;
    const size_t count = static_cast<size_t>(got) / sizeof(uffd_msg);
    for (size_t i = 0; i < count; ++i) {
      const uffd_msg& message = messages[i];
      switch (message.event) {
        case UFFD_EVENT_PAGEFAULT: {
          // A page of a watched range was dropped and touched again before the range was
          // unwatched: give it what the kernel would have, a zero page.
          uffdio_zeropage zero{};
          zero.range.start = message.arg.pagefault.address & ~(PageSize() - 1);
          zero.range.len = PageSize();
          ioctl(uffd_.get(), UFFDIO_ZEROPAGE, &zero);
          break;
        }
        case UFFD_EVENT_UNMAP:
          on_unmap_(message.arg.remove.start, message.arg.remove.end - message.arg.remove.start);
          break;
        case UFFD_EVENT_REMOVE:
          on_unmap_(message.arg.remove.start, message.arg.remove.end - message.arg.remove.start);
          Unwatch(message.arg.remove.start, message.arg.remove.end - message.arg.remove.start);
          break;
        case UFFD_EVENT_REMAP:
          on_unmap_(message.arg.remap.from, message.arg.remap.len);
          break;
        default:
          break;
      }
    }
  }
}

void UnmapMonitor::Run() {
  while (!stopping_.load()) {
    pollfd fds[2] = {{uffd_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    const int ready = poll(fds, 2, 1000);
    if (ready < 0 && errno != EINTR) return;
    if ((fds[0].revents & (POLLERR | POLLHUP)) != 0) return;
    if ((fds[0].revents & POLLIN) != 0 && !DrainEvents()) return;
  }
}

}  // namespace chorus::ibverbs
