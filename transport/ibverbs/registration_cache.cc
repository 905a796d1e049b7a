#include "chorus/transport/ibverbs/registration_cache.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <utility>

#include "chorus/core/logging.h"
#include "chorus/core/status.h"

namespace chorus::ibverbs {
namespace {

// Kept registrations beyond this many are evicted like those beyond the byte capacity. Each
// watched range may split a mapping in the kernel into up to three; the process has a limit on
// their number (vm.max_map_count, 65530 by default) that its own munmap and mprotect calls also
// need room in.
constexpr size_t kMaxKeptEntries = 4096;

uintptr_t PageSize() {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return page;
}

void LogOnce(std::atomic<bool>& logged, const absl::Status& why, const char* what) {
  if (!logged.exchange(true)) {
    CHORUS_LOG(kInfo, "ibverbs") << what << ": " << why.message();
  }
}

std::atomic<bool> logged_no_monitor{false};
std::atomic<bool> logged_not_watchable{false};

}  // namespace

struct RegistrationCache::Entry {
  uintptr_t start = 0;  // the pages [start, end), registered once `registered`
  uintptr_t end = 0;
  MemoryRegion region;
  bool registered = false;
  bool watched = false;  // holds one Watch of [start, end)
  int leases = 0;
  bool live = false;   // in live_
  bool stale = false;  // an unmap overlapped it while it was being made (in pending_)
  bool in_lru = false;
  std::list<Entry>::iterator self;
  std::list<Entry*>::iterator lru;
};

absl::StatusOr<std::unique_ptr<RegistrationCache>> RegistrationCache::Create(Registrar& registrar,
                                                                             size_t capacity_bytes,
                                                                             bool watch_unmaps) {
  std::shared_ptr<UnmapMonitor> monitor;
  if (watch_unmaps) {
    absl::StatusOr<std::shared_ptr<UnmapMonitor>> shared = UnmapMonitor::ForProcess();
    if (shared.ok()) {
      monitor = *std::move(shared);
    } else {
      LogOnce(logged_no_monitor, shared.status(),
              "memory registrations are not cached (each buffer is registered for each use)");
    }
  }
  return CreateWithMonitor(registrar, capacity_bytes, std::move(monitor));
}

absl::StatusOr<std::unique_ptr<RegistrationCache>> RegistrationCache::CreateWithMonitor(
    Registrar& registrar, size_t capacity_bytes, std::shared_ptr<UnmapMonitor> monitor) {
  return std::unique_ptr<RegistrationCache>(
      new RegistrationCache(registrar, capacity_bytes, std::move(monitor)));
}

RegistrationCache::RegistrationCache(Registrar& registrar, size_t capacity_bytes,
                                     std::shared_ptr<UnmapMonitor> monitor)
    : registrar_(registrar), capacity_(capacity_bytes), monitor_(std::move(monitor)) {
  if (monitor_ != nullptr) log_position_ = monitor_->LogEnd();
}

RegistrationCache::~RegistrationCache() {
  std::vector<Retired> retired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!entries_.empty()) RetireLocked(&entries_.front(), &retired);
    live_.clear();
    lru_.clear();
    pending_.clear();
  }
  Finish(retired);
}

RegistrationCache::Lease& RegistrationCache::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    cache_ = std::exchange(other.cache_, nullptr);
    entry_ = std::exchange(other.entry_, nullptr);
    region_ = std::exchange(other.region_, MemoryRegion());
  }
  return *this;
}

void RegistrationCache::Lease::Release() {
  if (cache_ == nullptr) return;
  std::exchange(cache_, nullptr)->ReleaseLease(std::exchange(entry_, nullptr));
  region_ = MemoryRegion();
}

absl::StatusOr<RegistrationCache::Lease> RegistrationCache::Acquire(const void* address,
                                                                    size_t bytes) {
  if (address == nullptr) return InvalidArgumentError("cannot register memory at address 0");
  const uintptr_t page = PageSize();
  const uintptr_t first = reinterpret_cast<uintptr_t>(address);
  const size_t length = std::max<size_t>(bytes, 1);
  if (length > UINTPTR_MAX - first || first + length > UINTPTR_MAX - (page - 1)) {
    return InvalidArgumentError("the memory range to register wraps around the address space");
  }
  const uintptr_t asked_start = first & ~(page - 1);
  const uintptr_t asked_end = (first + length + page - 1) & ~(page - 1);

  std::vector<Retired> retired;
  std::unique_lock<std::mutex> lock(mu_);
  ApplyUnmapsLocked(&retired);
  if (Entry* hit = FindContainingLocked(asked_start, asked_end); hit != nullptr) {
    if (hit->leases++ == 0 && hit->in_lru) {
      lru_.erase(hit->lru);
      hit->in_lru = false;
    }
    ++stats_.hits;
    Lease lease(this, hit, hit->region);
    lock.unlock();
    Finish(retired);
    return lease;
  }
  ++stats_.misses;
  uintptr_t start = asked_start;
  uintptr_t end = asked_end;
  if (monitor_ != nullptr) {
    // The new registration covers the kept ones it overlaps, which it replaces. Unleased ones
    // go now; leased ones stay findable until it is ready.
    for (Entry* old : LiveOverlappingLocked(asked_start, asked_end)) {
      start = std::min(start, old->start);
      end = std::max(end, old->end);
      if (old->leases == 0) DetachLocked(old, &retired);
    }
  }
  Entry* const entry = &entries_.emplace_back();
  entry->self = std::prev(entries_.end());
  // Until registered, [start, end) is the widest range it may cover, so that an unmap of any of
  // it marks the entry stale.
  entry->start = start;
  entry->end = end;
  entry->leases = 1;
  pending_.push_back(entry);
  lock.unlock();
  Finish(retired);
  retired.clear();

  // Watch, then register (see the header).
  bool watched = false;
  auto watch = [&](uintptr_t from, uintptr_t to) {
    if (monitor_ == nullptr) return;
    const absl::Status status = monitor_->Watch(from, to - from);
    watched = status.ok();
    if (!watched) {
      LogOnce(logged_not_watchable, status,
              "registrations of memory that cannot be watched for unmapping are not cached");
    }
  };
  watch(start, end);
  absl::StatusOr<MemoryRegion> region = registrar_.Register(start, end - start);
  if (!region.ok() && (start != asked_start || end != asked_end)) {
    // Part of what the replaced registrations covered may be gone: register what was asked.
    if (watched) monitor_->Unwatch(start, end - start);
    watched = false;
    start = asked_start;
    end = asked_end;
    watch(start, end);
    region = registrar_.Register(start, end - start);
  }

  lock.lock();
  entry->watched = watched;
  entry->start = start;
  entry->end = end;
  // Unmaps that raced the registration mark it stale.
  ApplyUnmapsLocked(&retired);
  pending_.erase(std::find(pending_.begin(), pending_.end(), entry));
  if (!region.ok()) {
    RetireLocked(entry, &retired);
    lock.unlock();
    Finish(retired);
    return region.status();
  }
  entry->region = *region;
  entry->registered = true;
  stats_.registered_bytes += end - start;
  ++stats_.entries;
  if (!watched) {
    ++stats_.uncached;
  } else if (!entry->stale && FindContainingLocked(start, end) == nullptr) {
    // (A kept entry containing this one was made by a concurrent miss: it stays, this one goes
    // with its lease.)
    for (Entry* old : LiveOverlappingLocked(start, end)) DetachLocked(old, &retired);
    live_.emplace(start, entry);
    entry->live = true;
  }
  EvictLocked(&retired);
  Lease lease(this, entry, entry->region);
  lock.unlock();
  Finish(retired);
  return lease;
}

void RegistrationCache::ReleaseLease(Entry* entry) {
  std::vector<Retired> retired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ApplyUnmapsLocked(&retired);
    if (--entry->leases == 0) {
      if (entry->live) {
        entry->lru = lru_.insert(lru_.end(), entry);
        entry->in_lru = true;
      } else {
        RetireLocked(entry, &retired);
      }
    }
    EvictLocked(&retired);
  }
  Finish(retired);
}

RegistrationCache::Stats RegistrationCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void RegistrationCache::ApplyUnmapsLocked(std::vector<Retired>* retired) {
  if (monitor_ == nullptr) return;
  const bool complete = monitor_->ReadUnmapped(&log_position_, [&](uintptr_t start, size_t bytes) {
    InvalidateLocked(start, start + bytes, retired);
  });
  if (!complete) InvalidateLocked(0, UINTPTR_MAX, retired);
}

void RegistrationCache::InvalidateLocked(uintptr_t start, uintptr_t end,
                                         std::vector<Retired>* retired) {
  for (Entry* entry : LiveOverlappingLocked(start, end)) {
    DetachLocked(entry, retired);
    ++stats_.invalidations;
  }
  for (Entry* entry : pending_) {
    if (!entry->stale && entry->start < end && start < entry->end) {
      entry->stale = true;
      ++stats_.invalidations;
    }
  }
}

RegistrationCache::Entry* RegistrationCache::FindContainingLocked(uintptr_t start,
                                                                  uintptr_t end) const {
  auto it = live_.upper_bound(start);
  if (it == live_.begin()) return nullptr;
  Entry* entry = std::prev(it)->second;
  return entry->end >= end ? entry : nullptr;
}

std::vector<RegistrationCache::Entry*> RegistrationCache::LiveOverlappingLocked(
    uintptr_t start, uintptr_t end) const {
  std::vector<Entry*> overlapping;
  auto it = live_.upper_bound(start);
  if (it != live_.begin() && std::prev(it)->second->end > start) --it;
  for (; it != live_.end() && it->first < end; ++it) overlapping.push_back(it->second);
  return overlapping;
}

void RegistrationCache::DetachLocked(Entry* entry, std::vector<Retired>* retired) {
  if (entry->live) {
    live_.erase(entry->start);
    entry->live = false;
  }
  if (entry->in_lru) {
    lru_.erase(entry->lru);
    entry->in_lru = false;
  }
  if (entry->leases == 0) RetireLocked(entry, retired);
}

void RegistrationCache::RetireLocked(Entry* entry, std::vector<Retired>* retired) {
  Retired undo;
  undo.region = entry->region;
  undo.registered = entry->registered;
  undo.start = entry->start;
  undo.end = entry->end;
  undo.watched = entry->watched;
  retired->push_back(undo);
  if (entry->registered) {
    stats_.registered_bytes -= entry->end - entry->start;
    --stats_.entries;
  }
  entries_.erase(entry->self);
}

void RegistrationCache::EvictLocked(std::vector<Retired>* retired) {
  while ((stats_.registered_bytes > capacity_ || live_.size() > kMaxKeptEntries) && !lru_.empty()) {
    DetachLocked(lru_.front(), retired);
    ++stats_.evictions;
  }
}

void RegistrationCache::Finish(const std::vector<Retired>& retired) {
  for (const Retired& undo : retired) {
    if (undo.registered) registrar_.Deregister(undo.region);
    if (undo.watched) monitor_->Unwatch(undo.start, undo.end - undo.start);
  }
}

}  // namespace chorus::ibverbs
