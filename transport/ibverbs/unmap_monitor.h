// Watches address ranges for unmapping through userfaultfd events (UNMAP, REMOVE, REMAP) and
// reports each unmapped range to a callback, which runs on the monitor's thread with `guard`
// held (the caller's mutex), so that the range is dropped before the unmapping call returns.
#ifndef CHORUS_TRANSPORT_IBVERBS_UNMAP_MONITOR_H_
#define CHORUS_TRANSPORT_IBVERBS_UNMAP_MONITOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "chorus/core/socket.h"

namespace chorus::ibverbs {

// Whole pages [start, end).
struct PageRange {
  uintptr_t start = 0;
  uintptr_t end = 0;
};

// The pages covering [address, address + bytes); at least one page (bytes 0 counts as 1).
PageRange CoveringPages(const void* address, size_t bytes);

class UnmapMonitor {
 public:
  using OnUnmap = std::function<void(uintptr_t start, size_t bytes)>;

  static absl::StatusOr<std::unique_ptr<UnmapMonitor>> Create(std::mutex& guard, OnUnmap on_unmap);
  ~UnmapMonitor();
  UnmapMonitor(const UnmapMonitor&) = delete;
  UnmapMonitor& operator=(const UnmapMonitor&) = delete;

  // Page-aligned ranges.
  absl::Status Watch(uintptr_t start, size_t bytes);
  void Unwatch(uintptr_t start, size_t bytes);

 private:
  UnmapMonitor(std::mutex& guard, OnUnmap on_unmap)
      : guard_(guard), on_unmap_(std::move(on_unmap)) {}
  // Reads every pending event with guard_ held; false when the userfaultfd failed.
  bool DrainEvents();
  void Run();

  std::mutex& guard_;
  OnUnmap on_unmap_;
  ScopedFd uffd_;
  ScopedFd wake_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace chorus::ibverbs

#endif  // CHORUS_TRANSPORT_IBVERBS_UNMAP_MONITOR_H_
