// The unmap monitor on its own: every way of taking memory away from a watched range is reported
// by the time the call returns, in both registration modes; watching is counted per Watch; memory
// the kernel cannot watch is refused without leaving anything registered; a reader that falls
// behind is told; a forked child's unmaps neither wait for the monitor nor reach it.
//
// Without userfaultfd (not permitted here) each case reports itself skipped.
#include "chorus/transport/ibverbs/unmap_monitor.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chorus/core/status.h"

namespace chorus::ibverbs {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

struct Range {
  uintptr_t start;
  size_t bytes;
  bool operator==(const Range& other) const { return start == other.start && bytes == other.bytes; }
};

std::ostream& operator<<(std::ostream& out, const Range& range) {
  return out << "[0x" << std::hex << range.start << ", +0x" << range.bytes << std::dec << ")";
}

std::string UnprivilegedSetting() {
  std::ifstream file("/proc/sys/vm/unprivileged_userfaultfd");
  std::string value;
  if (!(file >> value)) return "unreadable";
  return value;
}

// A monitor in the given mode, or null after reporting the case skipped.
std::shared_ptr<UnmapMonitor> MonitorOrSkip(bool write_protect_mode) {
  UnmapMonitor::Options options;
  options.allow_write_protect_mode = write_protect_mode;
  absl::StatusOr<std::shared_ptr<UnmapMonitor>> monitor = UnmapMonitor::Create(options);
  if (!monitor.ok()) {
    WARN("SKIPPED: no unmap monitor here: " << ErrorText(monitor.status())
                                            << " (/proc/sys/vm/unprivileged_userfaultfd: "
                                            << UnprivilegedSetting() << ")");
    return nullptr;
  }
  if (write_protect_mode && !(*monitor)->write_protect_mode()) {
    WARN("SKIPPED: the kernel cannot watch in write-protect mode here");
    return nullptr;
  }
  return *std::move(monitor);
}

std::vector<Range> Unmapped(UnmapMonitor& monitor, uint64_t* position, bool* complete = nullptr) {
  std::vector<Range> ranges;
  const bool all = monitor.ReadUnmapped(position, [&](uintptr_t start, size_t bytes) {
    ranges.push_back(Range{start, bytes});
  });
  if (complete != nullptr) *complete = all;
  return ranges;
}

uintptr_t MapAnonymous(size_t bytes) {
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(memory != MAP_FAILED);
  std::memset(memory, 0x5a, bytes);
  return reinterpret_cast<uintptr_t>(memory);
}

void Unmap(uintptr_t start, size_t bytes) {
  REQUIRE(munmap(reinterpret_cast<void*>(start), bytes) == 0);
}

void DropPages(uintptr_t start, size_t bytes) {
  REQUIRE(madvise(reinterpret_cast<void*>(start), bytes, MADV_DONTNEED) == 0);
}

TEST_CASE("munmap of watched memory is logged by the time it returns") {
  const bool write_protect = GENERATE(true, false);
  INFO("write-protect mode: " << write_protect);
  std::shared_ptr<UnmapMonitor> monitor = MonitorOrSkip(write_protect);
  if (monitor == nullptr) return;
  const uintptr_t base = MapAnonymous(16 * kPage);
  REQUIRE(monitor->Watch(base, 16 * kPage).ok());
  uint64_t position = monitor->LogEnd();

  Unmap(base + 4 * kPage, 4 * kPage);
  CHECK(Unmapped(*monitor, &position) == std::vector<Range>{{base + 4 * kPage, 4 * kPage}});
  CHECK(Unmapped(*monitor, &position).empty());

  // Memory that is not watched is not reported.
  const uintptr_t other = MapAnonymous(2 * kPage);
  Unmap(other, 2 * kPage);
  CHECK(Unmapped(*monitor, &position).empty());

  // The call's whole range is reported, also where it goes past the watched pages.
  Unmap(base, 4 * kPage);
  Unmap(base + 8 * kPage, 8 * kPage);
  CHECK(Unmapped(*monitor, &position) ==
        std::vector<Range>{{base, 4 * kPage}, {base + 8 * kPage, 8 * kPage}});
  monitor->Unwatch(base, 16 * kPage);
}

TEST_CASE("madvise(MADV_DONTNEED) is logged and the dropped pages stay usable") {
  const bool write_protect = GENERATE(true, false);
  INFO("write-protect mode: " << write_protect);
  std::shared_ptr<UnmapMonitor> monitor = MonitorOrSkip(write_protect);
  if (monitor == nullptr) return;
  const uintptr_t base = MapAnonymous(8 * kPage);
  REQUIRE(monitor->Watch(base, 8 * kPage).ok());
  uint64_t position = monitor->LogEnd();

  DropPages(base + 2 * kPage, 2 * kPage);
  CHECK(Unmapped(*monitor, &position) == std::vector<Range>{{base + 2 * kPage, 2 * kPage}});

  // A user-mode access to a dropped page (in missing-page mode, resolved by the monitor).
  volatile const uint8_t* dropped = reinterpret_cast<const uint8_t*>(base + 2 * kPage);
  CHECK(dropped[0] == 0);
  reinterpret_cast<uint8_t*>(base + 2 * kPage)[1] = 7;
  CHECK(dropped[1] == 7);
  // A kernel-mode access: read(2) into the other dropped page.
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  const char text[] = "through the kernel";
  REQUIRE(write(pipe_fds[1], text, sizeof(text)) == static_cast<ssize_t>(sizeof(text)));
  char* target = reinterpret_cast<char*>(base + 3 * kPage + 100);
  CHECK(read(pipe_fds[0], target, sizeof(text)) == static_cast<ssize_t>(sizeof(text)));
  CHECK(std::string(target) == text);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  // Pages that were not dropped kept their contents.
  CHECK(reinterpret_cast<const uint8_t*>(base)[0] == 0x5a);
  CHECK(Unmapped(*monitor, &position).empty());

  monitor->Unwatch(base, 8 * kPage);
  Unmap(base, 8 * kPage);
}

TEST_CASE("mremap that moves watched memory logs the old range") {
  std::shared_ptr<UnmapMonitor> monitor = MonitorOrSkip(true);
  if (monitor == nullptr) return;
  const uintptr_t base = MapAnonymous(4 * kPage);
  REQUIRE(monitor->Watch(base, 4 * kPage).ok());
  uint64_t position = monitor->LogEnd();
  // A destination that cannot be the old range: reserved, then replaced by the move.
  const uintptr_t destination = MapAnonymous(4 * kPage);
  void* moved = mremap(reinterpret_cast<void*>(base), 4 * kPage, 4 * kPage,
                       MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(destination));
  REQUIRE(moved == reinterpret_cast<void*>(destination));
  // Reported as moved and as unmapped: once or twice.
  const std::vector<Range> unmapped = Unmapped(*monitor, &position);
  CHECK_FALSE(unmapped.empty());
  for (const Range& range : unmapped) CHECK(range == Range{base, 4 * kPage});
  CHECK(reinterpret_cast<const uint8_t*>(destination)[0] == 0x5a);
  monitor->Unwatch(base, 4 * kPage);
  Unmap(destination, 4 * kPage);
}

TEST_CASE("a page stays watched until as many Unwatch calls as Watch calls covered it") {
  std::shared_ptr<UnmapMonitor> monitor = MonitorOrSkip(true);
  if (monitor == nullptr) return;
  const uintptr_t base = MapAnonymous(12 * kPage);
  REQUIRE(monitor->Watch(base, 8 * kPage).ok());
  REQUIRE(monitor->Watch(base + 4 * kPage, 8 * kPage).ok());
  uint64_t position = monitor->LogEnd();

  monitor->Unwatch(base, 8 * kPage);
  // Pages 0-3 were watched by the first Watch only; 4-11 by the second.
  Unmap(base + kPage, kPage);
  CHECK(Unmapped(*monitor, &position).empty());
  Unmap(base + 5 * kPage, kPage);
  CHECK(Unmapped(*monitor, &position) == std::vector<Range>{{base + 5 * kPage, kPage}});

  monitor->Unwatch(base + 4 * kPage, 8 * kPage);
  Unmap(base + 6 * kPage, kPage);
  CHECK(Unmapped(*monitor, &position).empty());
  Unmap(base, kPage);
  Unmap(base + 2 * kPage, 3 * kPage);
  Unmap(base + 7 * kPage, 5 * kPage);
}

TEST_CASE("memory the kernel cannot watch is refused and left unwatched") {
  std::shared_ptr<UnmapMonitor> monitor = MonitorOrSkip(true);
  if (monitor == nullptr) return;

  SECTION("file-backed memory") {
    FILE* file = std::tmpfile();
    REQUIRE(file != nullptr);
    REQUIRE(ftruncate(fileno(file), static_cast<off_t>(2 * kPage)) == 0);
    void* mapped = mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, fileno(file), 0);
    REQUIRE(mapped != MAP_FAILED);
    const absl::Status status = monitor->Watch(reinterpret_cast<uintptr_t>(mapped), 2 * kPage);
    CHECK(GetErrorKind(status) == ErrorKind::kInvalidArgument);
    REQUIRE(munmap(mapped, 2 * kPage) == 0);
    std::fclose(file);
  }

  SECTION("a range with a hole: the mapped part is not left registered") {
    const uintptr_t base = MapAnonymous(4 * kPage);
    Unmap(base + 2 * kPage, kPage);
    uint64_t position = monitor->LogEnd();
    CHECK_FALSE(monitor->Watch(base, 4 * kPage).ok());
    Unmap(base, 2 * kPage);
    Unmap(base + 3 * kPage, kPage);
    CHECK(Unmapped(*monitor, &position).empty());
  }

  SECTION("ranges that are not whole pages") {
    const uintptr_t base = MapAnonymous(2 * kPage);
    CHECK(GetErrorKind(monitor->Watch(base + 1, kPage)) == ErrorKind::kInvalidArgument);
    CHECK(GetErrorKind(monitor->Watch(base, kPage + 1)) == ErrorKind::kInvalidArgument);
    CHECK(GetErrorKind(monitor->Watch(base, 0)) == ErrorKind::kInvalidArgument);
    Unmap(base, 2 * kPage);
  }
}

TEST_CASE("readers have positions of their own, and one that falls behind is told") {
  std::shared_ptr<UnmapMonitor> monitor = MonitorOrSkip(true);
  if (monitor == nullptr) return;
  const uintptr_t base = MapAnonymous(2 * kPage);
  REQUIRE(monitor->Watch(base, 2 * kPage).ok());
  uint64_t first = monitor->LogEnd();
  uint64_t second = first;

  DropPages(base, kPage);
  CHECK(Unmapped(*monitor, &first) == std::vector<Range>{{base, kPage}});
  DropPages(base + kPage, kPage);
  CHECK(Unmapped(*monitor, &first) == std::vector<Range>{{base + kPage, kPage}});
  CHECK(Unmapped(*monitor, &second) == std::vector<Range>{{base, kPage}, {base + kPage, kPage}});

  // Far more events than the log holds.
  for (int i = 0; i < 3000; ++i) DropPages(base, kPage);
  bool complete = true;
  Unmapped(*monitor, &first, &complete);
  CHECK_FALSE(complete);
  // Caught up again afterwards.
  DropPages(base + kPage, kPage);
  CHECK(Unmapped(*monitor, &first, &complete) == std::vector<Range>{{base + kPage, kPage}});
  CHECK(complete);

  monitor->Unwatch(base, 2 * kPage);
  Unmap(base, 2 * kPage);
}

TEST_CASE("a forked child's unmaps neither wait for the monitor nor reach it") {
  std::shared_ptr<UnmapMonitor> monitor = MonitorOrSkip(true);
  if (monitor == nullptr) return;
  const uintptr_t base = MapAnonymous(4 * kPage);
  REQUIRE(monitor->Watch(base, 4 * kPage).ok());
  uint64_t position = monitor->LogEnd();

  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // No monitor thread exists here: had the child's mapping stayed registered, this would
    // wait forever.
    munmap(reinterpret_cast<void*>(base), 4 * kPage);
    madvise(reinterpret_cast<void*>(base), 4 * kPage, MADV_DONTNEED);
    _exit(0);
  }
  int status = -1;
  pid_t waited = 0;
  for (int i = 0; i < 1000 && waited == 0; ++i) {
    waited = waitpid(child, &status, WNOHANG);
    if (waited == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (waited == 0) kill(child, SIGKILL);
  REQUIRE(waited == child);
  CHECK(WIFEXITED(status));
  CHECK(Unmapped(*monitor, &position).empty());
  CHECK(reinterpret_cast<const uint8_t*>(base)[0] == 0x5a);

  monitor->Unwatch(base, 4 * kPage);
  Unmap(base, 4 * kPage);
}

TEST_CASE("the process's monitor is shared while in use") {
  absl::StatusOr<std::shared_ptr<UnmapMonitor>> first = UnmapMonitor::ForProcess();
  if (!first.ok()) {
    WARN("SKIPPED: no unmap monitor here: " << ErrorText(first.status()));
    return;
  }
  absl::StatusOr<std::shared_ptr<UnmapMonitor>> second = UnmapMonitor::ForProcess();
  REQUIRE(second.ok());
  CHECK(first->get() == second->get());
}

}  // namespace
}  // namespace chorus::ibverbs
