// Registrations of user buffers, kept by page range so a buffer used again is not registered
// again (ibv_reg_mr pins and maps every page: milliseconds for large buffers).
//
// A cached registration of memory that was unmapped and mapped again at the same address would
// still point at the old pages, a silent-corruption bug. So every cached range is watched by an
// UnmapMonitor, which drops the range's registration before the unmapping call returns. Where
// the monitor cannot run (userfaultfd not permitted) or cannot watch a range (file-backed
// memory), registrations are not kept past their last use.
//
// Lock order: the cache's mutex, then nothing. The monitor's thread takes the mutex while it
// reads events; nothing that can fault on user memory or register runs under it (registering
// faults pages in, and a fault in a watched range waits for the monitor), so the registrar and
// Watch are called without it, and an unmap that raced a registration discards the new one.
#ifndef CHORUS_TRANSPORT_IBVERBS_REGISTRATION_CACHE_H_
#define CHORUS_TRANSPORT_IBVERBS_REGISTRATION_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>

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

// What registers memory: the verbs device; a fake in tests.
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
  // `capacity_bytes`: registered bytes kept while unused, least recently used evicted first.
  // `watch_unmaps` false: nothing is kept past its last lease.
  static absl::StatusOr<std::unique_ptr<RegistrationCache>> Create(Registrar& registrar,
                                                                   size_t capacity_bytes,
                                                                   bool watch_unmaps = true);
  // Every lease must have ended.
  ~RegistrationCache();
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  // Holds a registration: it is not deregistered while a lease on it lives.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept { *this = std::move(other); }
    Lease& operator=(Lease&& other) noexcept;
    ~Lease() { Release(); }
    uint32_t lkey() const;
    uint32_t rkey() const;

   private:
    friend class RegistrationCache;
    Lease(RegistrationCache* cache, std::shared_ptr<Entry> entry)
        : cache_(cache), entry_(std::move(entry)) {}
    void Release();
    RegistrationCache* cache_ = nullptr;
    std::shared_ptr<Entry> entry_;
  };

  // A registration covering [address, address + bytes), from the cache or made now. The
  // registrar's error when it cannot register.
  absl::StatusOr<Lease> Acquire(const void* address, size_t bytes);

  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t evictions = 0;
    uint64_t invalidations = 0;  // registrations dropped because their memory was unmapped
    size_t registered_bytes = 0;
    size_t entries = 0;  // cached (looked up), leased or not
  };
  Stats stats() const;
  // Whether registrations outlive their leases here (the unmap monitor runs).
  bool caching() const { return monitor_ != nullptr; }

 private:
  struct Entry {
    MemoryRegion region;
    uintptr_t end = 0;
    int leases = 0;
    bool cached = false;              // in entries_ (found by lookups), watched by the monitor
    std::list<Entry*>::iterator lru;  // in lru_ while cached and not leased
  };

  RegistrationCache(Registrar& registrar, size_t capacity_bytes)
      : registrar_(registrar), capacity_(capacity_bytes) {}
  void OnUnmap(uintptr_t start, size_t bytes);
  void ReleaseEntry(const std::shared_ptr<Entry>& entry);
  // Takes `entry` out of the lookups; deregisters it now if nothing leases it. With mu_ held.
  void Drop(const std::shared_ptr<Entry>& entry);
  void EvictOverCapacity();

  Registrar& registrar_;
  const size_t capacity_;
  std::unique_ptr<UnmapMonitor> monitor_;

  mutable std::mutex mu_;
  std::map<uintptr_t, std::shared_ptr<Entry>> entries_;  // by start; disjoint ranges
  std::list<Entry*> lru_;                                // unleased cached, oldest first
  uint64_t unmap_events_ = 0;  // lets a registration made without mu_ see an unmap it raced
  Stats stats_;
};

}  // namespace chorus::ibverbs

#endif  // CHORUS_TRANSPORT_IBVERBS_REGISTRATION_CACHE_H_
