#include "chorus/transport/ibverbs/registration_cache.h"

#include <utility>
#include <vector>

#include "chorus/core/logging.h"

namespace chorus::ibverbs {

absl::StatusOr<std::unique_ptr<RegistrationCache>> RegistrationCache::Create(Registrar& registrar,
                                                                             size_t capacity_bytes,
                                                                             bool watch_unmaps) {
  std::unique_ptr<RegistrationCache> cache(new RegistrationCache(registrar, capacity_bytes));
  if (watch_unmaps && capacity_bytes > 0) {
    absl::StatusOr<std::unique_ptr<UnmapMonitor>> monitor = UnmapMonitor::Create(
        cache->mu_,
        [raw = cache.get()](uintptr_t start, size_t bytes) { raw->OnUnmap(start, bytes); });
    if (monitor.ok()) {
      cache->monitor_ = *std::move(monitor);
    } else {
      CHORUS_LOG(kInfo, "ibverbs") << "registrations are not cached (each buffer is registered "
                                   << "for each use): " << monitor.status().message();
    }
  }
  return cache;
}

RegistrationCache::~RegistrationCache() {
  monitor_.reset();  // no more events
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [start, entry] : entries_) {
    if (entry->leases == 0) registrar_.Deregister(entry->region);
  }
}

RegistrationCache::Lease& RegistrationCache::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    cache_ = other.cache_;
    entry_ = std::move(other.entry_);
    other.cache_ = nullptr;
  }
  return *this;
}

uint32_t RegistrationCache::Lease::lkey() const { return entry_->region.lkey; }
uint32_t RegistrationCache::Lease::rkey() const { return entry_->region.rkey; }

void RegistrationCache::Lease::Release() {
  if (cache_ != nullptr && entry_ != nullptr) cache_->ReleaseEntry(entry_);
  cache_ = nullptr;
  entry_.reset();
}

absl::StatusOr<RegistrationCache::Lease> RegistrationCache::Acquire(const void* address,
                                                                    size_t bytes) {
  const PageRange pages = CoveringPages(address, bytes);
  uint64_t events_before;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.upper_bound(pages.start);
    if (it != entries_.begin()) {
      const std::shared_ptr<Entry>& entry = std::prev(it)->second;
      if (entry->region.start <= pages.start && entry->end >= pages.end) {
        if (entry->leases++ == 0) lru_.erase(entry->lru);
        ++stats_.hits;
        return Lease(this, entry);
      }
    }
    ++stats_.misses;
    events_before = unmap_events_;
  }
  // Registering faults the pages in: never under mu_ (see the header).
  absl::StatusOr<MemoryRegion> region = registrar_.Register(pages.start, pages.end - pages.start);
  if (!region.ok()) return region.status();
  auto entry = std::make_shared<Entry>();
  entry->region = *region;
  entry->end = pages.end;
  entry->leases = 1;
  const bool watched =
      monitor_ != nullptr && monitor_->Watch(pages.start, pages.end - pages.start).ok();
  std::lock_guard<std::mutex> lock(mu_);
  stats_.registered_bytes += entry->region.bytes;
  // Kept only if watched and no unmap happened while it was being made (it may have been of
  // these pages, before the watch began).
  if (!watched || unmap_events_ != events_before) return Lease(this, entry);
  // Ranges in the lookups stay disjoint: a new registration replaces those it overlaps.
  std::vector<std::shared_ptr<Entry>> overlapped;
  for (auto it = entries_.lower_bound(pages.start); it != entries_.end() && it->first < pages.end;
       ++it) {
    overlapped.push_back(it->second);
  }
  auto before = entries_.lower_bound(pages.start);
  if (before != entries_.begin() && std::prev(before)->second->end > pages.start) {
    overlapped.push_back(std::prev(before)->second);
  }
  for (const auto& old : overlapped) Drop(old);
  entry->cached = true;
  entries_[pages.start] = entry;
  return Lease(this, entry);
}

void RegistrationCache::ReleaseEntry(const std::shared_ptr<Entry>& entry) {
  std::lock_guard<std::mutex> lock(mu_);
  if (--entry->leases > 0) return;
  if (!entry->cached) {
    registrar_.Deregister(entry->region);
    stats_.registered_bytes -= entry->region.bytes;
    return;
  }
  entry->lru = lru_.insert(lru_.end(), entry.get());
  EvictOverCapacity();
}

void RegistrationCache::Drop(const std::shared_ptr<Entry>& entry) {
  entries_.erase(entry->region.start);
  entry->cached = false;
  if (entry->leases > 0) return;  // deregistered when its last lease ends
  lru_.erase(entry->lru);
  registrar_.Deregister(entry->region);
  stats_.registered_bytes -= entry->region.bytes;
}

void RegistrationCache::EvictOverCapacity() {
  while (stats_.registered_bytes > capacity_ && !lru_.empty()) {
    Entry* oldest = lru_.front();
    auto it = entries_.find(oldest->region.start);
    const std::shared_ptr<Entry> entry = it->second;
    if (monitor_ != nullptr) monitor_->Unwatch(entry->region.start, entry->region.bytes);
    Drop(entry);
    ++stats_.evictions;
  }
}

void RegistrationCache::OnUnmap(uintptr_t start, size_t bytes) {
  // Called by the monitor with mu_ held.
  ++unmap_events_;
  const uintptr_t end = start + bytes;
  std::vector<std::shared_ptr<Entry>> hit;
  auto it = entries_.upper_bound(start);
  if (it != entries_.begin()) --it;
  for (; it != entries_.end() && it->first < end; ++it) {
    if (it->second->end > start) hit.push_back(it->second);
  }
  for (const auto& entry : hit) {
    Drop(entry);
    ++stats_.invalidations;
  }
}

RegistrationCache::Stats RegistrationCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats stats = stats_;
  stats.entries = entries_.size();
  return stats;
}

}  // namespace chorus::ibverbs
