// Reports when watched memory is unmapped, so that registrations of it can be dropped before the
// address is reused.
//
// A cached memory registration pins the physical pages that were mapped when it was made. If the
// program unmaps that memory and maps new memory at the same address, a registration found by
// address would send or receive through the old pages: silent corruption. glibc's free() unmaps
// large blocks with an internal munmap that cannot be interposed, so the monitor asks the kernel
// instead: it registers watched ranges with a userfaultfd and reads its UNMAP (munmap, brk shrink,
// a MAP_FIXED mapping on top), REMOVE (madvise MADV_DONTNEED/MADV_REMOVE) and REMAP (mremap's old
// range) events on a thread of its own.
//
// Ordering. The kernel does not let munmap (or madvise, mremap) return until the event has been
// read from the userfaultfd. The monitor's thread marks itself busy before each read and appends
// the ranges it read to a log before it clears the mark; ReadUnmapped() waits out a busy mark
// before it reads the log. So a thread that unmaps memory and then calls ReadUnmapped() always
// finds that range, however the threads interleave.
//
// Deadlock freedom. A thread blocked in munmap or madvise may hold anything: the allocator's arena
// lock (free() trims the heap under it), a registration cache's mutex (a map node's free()), a
// sanitizer runtime's lock. So the monitor's thread takes no lock and allocates nothing: the log is
// a fixed ring of atomics that it writes without waiting, and when a reader falls a whole ring
// behind, ReadUnmapped() says so and the reader must treat all of its memory as unmapped.
//
// Fault modes. Registration needs a mode. Write-protect mode is preferred: the monitor never
// write-protects a page, so no access to watched memory ever waits for it and only the events are
// delivered. Where the kernel cannot watch anonymous memory in that mode, missing-page mode is
// used: an access to a page that is not present (one that madvise dropped, or one never touched)
// then waits until the monitor's thread maps a zero page there, as the kernel itself would have.
// Missing-page mode is refused when the userfaultfd only sees user-mode faults
// (UFFD_USER_MODE_ONLY, the fallback where unprivileged userfaultfd is off): a kernel access to
// such a page, read(2) into it or a memory registration, would fail with EFAULT.
//
// Fork. The child's mappings are not watched (no UFFD_FEATURE_EVENT_FORK) and the monitor's thread
// does not exist in the child, so a monitor, and anything that relies on it, belongs to the
// process that created it: a child must not use one it inherited. ForProcess() creates a new
// monitor in a forked child, and destroying an inherited monitor leaves the parent's alone.
//
// Thread-safe.
#ifndef CHORUS_TRANSPORT_IBVERBS_UNMAP_MONITOR_H_
#define CHORUS_TRANSPORT_IBVERBS_UNMAP_MONITOR_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace chorus::ibverbs {

class UnmapMonitor {
 public:
  struct Options {
    // False: always use missing-page mode (for tests of that mode).
    bool allow_write_protect_mode = true;
  };

  // A monitor of its own. Fails when the kernel has no userfaultfd, does not permit one here
  // (see /proc/sys/vm/unprivileged_userfaultfd and /dev/userfaultfd), lacks the unmap events, or
  // can watch in neither mode.
  static absl::StatusOr<std::shared_ptr<UnmapMonitor>> Create(const Options& options);

  // The monitor shared by everything in this process that watches memory (one per process:
  // a range can be registered with only one userfaultfd, so two monitors could not both watch
  // a buffer that two devices register). Created on first use; a failure is not remembered.
  static absl::StatusOr<std::shared_ptr<UnmapMonitor>> ForProcess();

  // Stops the thread and closes the userfaultfd, which stops all watching.
  ~UnmapMonitor();
  UnmapMonitor(const UnmapMonitor&) = delete;
  UnmapMonitor& operator=(const UnmapMonitor&) = delete;

  // Watches the page-aligned range [start, start + bytes) until as many Unwatch calls for each of
  // its pages as Watch calls have covered it. Fails (watching nothing new) when the range is not
  // entirely mapped, or is memory the kernel cannot watch (file-backed, device or hugetlb memory,
  // or memory another userfaultfd watches). The range must not be mapped or unmapped by another
  // thread during the call.
  absl::Status Watch(uintptr_t start, size_t bytes);

  // Ends one Watch of the page-aligned range; pages no Watch covers any more stop being watched.
  void Unwatch(uintptr_t start, size_t bytes);

  // The log position a new reader starts from: ranges unmapped later are read from it.
  uint64_t LogEnd() const;

  // Calls `visit(start, bytes)` for each range unmapped (wholly or partly inside watched memory)
  // since `*position`, oldest first, and advances `*position`. Every unmap whose call returned
  // before this call began is included. Returns false when ranges were lost because the reader
  // fell too far behind: the reader must then treat all of its watched memory as unmapped.
  // Calls for one position must not overlap; different positions may be read concurrently.
  bool ReadUnmapped(uint64_t* position, absl::FunctionRef<void(uintptr_t, size_t)> visit);

  // Whether ranges are registered in write-protect mode (else missing-page mode).
  bool write_protect_mode() const { return write_protect_mode_; }

 private:
  // One entry of the log: `seq` is the entry's index + 1 once written, 0 while being written.
  struct Slot {
    std::atomic<uint64_t> seq{0};
    std::atomic<uint64_t> start{0};
    std::atomic<uint64_t> bytes{0};
  };
  static constexpr size_t kLogSlots = 1024;

  UnmapMonitor(int uffd, int wake_fd, bool user_mode_only);
  absl::Status ChooseMode(const Options& options);
  void Run();
  void HandleFault(uint64_t address, uint64_t flags);
  void Append(uint64_t start, uint64_t bytes);
  // Registers [start, end) with the userfaultfd: the whole range, already watched pages
  // included, since their old mapping may have been replaced by one nobody registered yet.
  // With watch_mu_ held.
  absl::Status Register(uintptr_t start, uintptr_t end);
  void Unregister(uintptr_t start, uintptr_t end);
  // Splits the watch count span containing `address` so that one starts there.
  void SplitSpanAt(uintptr_t address);

  const int uffd_;
  const int wake_fd_;  // an eventfd: written by the destructor to stop the thread
  const bool user_mode_only_;
  const pid_t pid_;  // the creating process: ForProcess() replaces the monitor in a child
  bool write_protect_mode_ = true;

  // Written by the monitor's thread only. `busy_` is odd from before a read of the userfaultfd
  // until the ranges read are in the log.
  std::atomic<bool> running_{false};
  std::atomic<uint64_t> busy_{0};
  std::atomic<uint64_t> log_end_{0};
  Slot log_[kLogSlots];

  // How many Watch calls cover each watched page: disjoint spans [start, end) keyed by start,
  // each with a count of at least 1. Guarded by watch_mu_, which is held around the
  // registration system calls so that they follow the counts' order. The monitor's thread never
  // takes it.
  struct Span {
    uintptr_t end;
    int count;
  };
  std::mutex watch_mu_;
  std::map<uintptr_t, Span> spans_;

  std::thread thread_;
};

}  // namespace chorus::ibverbs

#endif  // CHORUS_TRANSPORT_IBVERBS_UNMAP_MONITOR_H_
