// Registrations of user buffers, kept by page range so that a buffer used again is not registered
// again (ibv_reg_mr pins and maps every page: milliseconds for a large buffer).
//
// A kept registration of memory that was unmapped and mapped again at the same address would
// still point at the old pages: silent corruption. So every kept range is watched by the
// process's UnmapMonitor, and each lookup first drops the registrations of memory unmapped since
// the last one. The monitor guarantees that an unmap whose call has returned is seen: a thread
// that unmaps a buffer, maps one at the same address and acquires it gets a new registration.
// Where unmaps cannot be watched (no userfaultfd here, or memory of a kind the kernel cannot
// watch: file-backed, device, hugetlb), a registration is dropped when its last lease ends.
//
// Order of a miss. The range is watched first, then registered, then made findable: an unmap
// after the watch began is reported, so a registration (which pins the pages mapped when it is
// made) that an unmap raced is seen stale and never kept. Registration may fault pages in; in
// the monitor's missing-page mode such a fault waits for the monitor's thread, which never waits
// for anything (see unmap_monitor.h), so the order is safe.
//
// Lock order. The cache's mutex is the only lock it takes, and never together with another of
// its own: the registrar and the monitor's Watch and Unwatch are called without it, and so is
// anything that touches user memory. Under it the cache reads the monitor's log, which may wait
// for the monitor's thread to finish logging what it read; that thread takes no lock at all, so
// this cannot deadlock, even when a thread holding the mutex is itself blocked in munmap or
// madvise (free() of a map node can trim the heap) waiting for that thread.
//
// Memory found unmapped is deregistered at the cache's next Acquire or lease end.
//
// One cache per process and device (protection domain). A forked child must not use its
// parent's: the child's memory is not watched.
//
// Thread-safe.
#ifndef CHORUS_TRANSPORT_IBVERBS_REGISTRATION_CACHE_H_
#define CHORUS_TRANSPORT_IBVERBS_REGISTRATION_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "chorus/transport/ibverbs/unmap_monitor.h"

namespace chorus::ibverbs {

// A registered region as the device made it (an ibv_mr behind `handle`).
struct MemoryRegion {
  void* handle = nullptr;
  uintptr_t start = 0;
  size_t bytes = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
};

// What registers memory: the verbs device (ibv_reg_mr, ibv_dereg_mr); a fake in tests. Called
// concurrently from the threads that acquire and release, never with the cache's mutex held.
class Registrar {
 public:
  virtual ~Registrar() = default;
  virtual absl::StatusOr<MemoryRegion> Register(uintptr_t start, size_t bytes) = 0;
  virtual void Deregister(const MemoryRegion& region) = 0;
};

class RegistrationCache {
 private:
  struct Entry;

 public:
  // `capacity_bytes`: registered bytes kept while no lease holds them; beyond it the least
  // recently used are deregistered. `watch_unmaps` false: nothing is kept past its last lease.
  // Watching uses the process's monitor (UnmapMonitor::ForProcess()); when there is none, the
  // cache works without keeping anything and logs why once.
  static absl::StatusOr<std::unique_ptr<RegistrationCache>> Create(Registrar& registrar,
                                                                   size_t capacity_bytes,
                                                                   bool watch_unmaps = true);
  // With the given monitor (null: nothing is kept).
  static absl::StatusOr<std::unique_ptr<RegistrationCache>> CreateWithMonitor(
      Registrar& registrar, size_t capacity_bytes, std::shared_ptr<UnmapMonitor> monitor);

  // Deregisters everything. Every lease must have ended.
  ~RegistrationCache();
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  // Holds a registration: it is not deregistered while a lease on it lives. Move-only; a
  // default-constructed or moved-from lease is empty. Thread-compatible.
  class Lease {
   public:
    Lease() = default;
    ~Lease() { Release(); }
    Lease(Lease&& other) noexcept { *this = std::move(other); }
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

    bool empty() const { return cache_ == nullptr; }
    explicit operator bool() const { return cache_ != nullptr; }
    uint32_t lkey() const { return region_.lkey; }
    uint32_t rkey() const { return region_.rkey; }
    // The whole registration: whole pages covering at least the acquired bytes.
    const MemoryRegion& region() const { return region_; }

    // Ends the lease now rather than at destruction.
    void Release();

   private:
    friend class RegistrationCache;
    Lease(RegistrationCache* cache, Entry* entry, const MemoryRegion& region)
        : cache_(cache), entry_(entry), region_(region) {}

    RegistrationCache* cache_ = nullptr;
    Entry* entry_ = nullptr;
    MemoryRegion region_;
  };

  // A registration covering [address, address + bytes) (0 bytes: the byte at `address`), kept
  // or made now. The registrar's error when it cannot register; InvalidArgument for a null
  // address or a range that wraps around.
  absl::StatusOr<Lease> Acquire(const void* address, size_t bytes);

  struct Stats {
    uint64_t hits = 0;            // acquisitions served by a kept registration
    uint64_t misses = 0;          // acquisitions that registered
    uint64_t evictions = 0;       // kept registrations deregistered to stay within capacity
    uint64_t invalidations = 0;   // registrations dropped because their memory was unmapped
    uint64_t uncached = 0;        // registrations not kept: their memory could not be watched
    size_t registered_bytes = 0;  // held now, leased or kept
    size_t entries = 0;           // registrations held now, leased or kept
  };
  Stats stats() const;

  // Whether registrations can outlive their leases (unmaps are watched).
  bool caching() const { return monitor_ != nullptr; }

 private:
  // What to undo for an entry after mu_ is released.
  struct Retired {
    MemoryRegion region;
    bool registered = false;
    uintptr_t start = 0;
    uintptr_t end = 0;
    bool watched = false;
  };

  RegistrationCache(Registrar& registrar, size_t capacity_bytes,
                    std::shared_ptr<UnmapMonitor> monitor);
  void ReleaseLease(Entry* entry);

  // With mu_ held.
  void ApplyUnmapsLocked(std::vector<Retired>* retired);
  void InvalidateLocked(uintptr_t start, uintptr_t end, std::vector<Retired>* retired);
  Entry* FindContainingLocked(uintptr_t start, uintptr_t end) const;
  std::vector<Entry*> LiveOverlappingLocked(uintptr_t start, uintptr_t end) const;
  // Makes `entry` unfindable; retires it now unless a lease holds it.
  void DetachLocked(Entry* entry, std::vector<Retired>* retired);
  void RetireLocked(Entry* entry, std::vector<Retired>* retired);
  void EvictLocked(std::vector<Retired>* retired);

  // Without mu_.
  void Finish(const std::vector<Retired>& retired);

  Registrar& registrar_;
  const size_t capacity_;
  const std::shared_ptr<UnmapMonitor> monitor_;  // null: nothing is kept

  mutable std::mutex mu_;
  std::list<Entry> entries_;          // every registration held or being made: owns them
  std::map<uintptr_t, Entry*> live_;  // findable, by start; disjoint ranges
  std::list<Entry*> lru_;             // live and unleased, least recently used first
  std::vector<Entry*> pending_;       // being registered
  uint64_t log_position_ = 0;         // in the monitor's log of unmapped ranges
  Stats stats_;
};

}  // namespace chorus::ibverbs

#endif  // CHORUS_TRANSPORT_IBVERBS_REGISTRATION_CACHE_H_
