// The registration cache with a fake registrar (no RDMA device): hits, misses and page rounding,
// least-recently-used eviction, leases that keep registrations, and above all that memory
// unmapped (munmap, free, madvise) and mapped again at the same address is registered again
// rather than served from the old registration, also while other threads acquire and release.
//
// Without userfaultfd (not permitted here) the cases that need it report themselves skipped.
#include "chorus/transport/ibverbs/registration_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "chorus/transport/ibverbs/unmap_monitor.h"

namespace chorus::ibverbs {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

// Records registrations; like ibv_reg_mr it faults the pages in and fails on memory that is not
// mapped. Thread-safe; mistakes are counted, not asserted (Catch2 assertions are for the test's
// own thread).
class FakeRegistrar : public Registrar {
 public:
  struct Registration {
    uintptr_t start;
    size_t bytes;
    uint64_t generation;  // the first word of the memory when registered, if read
    bool live;
  };

  absl::StatusOr<MemoryRegion> Register(uintptr_t start, size_t bytes) override {
    if (on_register) on_register();
    if (fail_next.exchange(false)) return InternalError("the fake registrar was told to fail");
    if (madvise(reinterpret_cast<void*>(start), bytes, MADV_POPULATE_READ) != 0) {
      return InternalError(absl::StrCat("memory not mapped: ", std::strerror(errno)));
    }
    const uint64_t generation =
        read_generation ? *reinterpret_cast<const volatile uint64_t*>(start) : 0;
    std::lock_guard<std::mutex> lock(mu_);
    const uint32_t key = ++next_key_;
    registrations_[key] = Registration{start, bytes, generation, true};
    MemoryRegion region;
    region.handle = reinterpret_cast<void*>(static_cast<uintptr_t>(key));
    region.start = start;
    region.bytes = bytes;
    region.lkey = key;
    region.rkey = key + 1000000;
    return region;
  }

  void Deregister(const MemoryRegion& region) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = registrations_.find(region.lkey);
    if (it == registrations_.end() || !it->second.live || it->second.start != region.start ||
        it->second.bytes != region.bytes) {
      ++mistakes_;
      return;
    }
    it->second.live = false;
  }

  Registration Get(uint32_t key) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = registrations_.find(key);
    return it == registrations_.end() ? Registration{0, 0, 0, false} : it->second;
  }
  bool Live(uint32_t key) const { return Get(key).live; }
  size_t registered() const {
    std::lock_guard<std::mutex> lock(mu_);
    return registrations_.size();
  }
  size_t live() const {
    std::lock_guard<std::mutex> lock(mu_);
    size_t count = 0;
    for (const auto& [key, registration] : registrations_) count += registration.live ? 1 : 0;
    return count;
  }
  int mistakes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return mistakes_;
  }

  std::atomic<bool> fail_next{false};
  bool read_generation = false;
  std::function<void()> on_register;

 private:
  mutable std::mutex mu_;
  uint32_t next_key_ = 0;
  std::map<uint32_t, Registration> registrations_;
  int mistakes_ = 0;
};

std::string UnprivilegedSetting() {
  std::ifstream file("/proc/sys/vm/unprivileged_userfaultfd");
  std::string value;
  if (!(file >> value)) return "unreadable";
  return value;
}

// A caching cache over the process's monitor (or, with `write_protect` false, over a monitor of
// its own in missing-page mode), or null after reporting the case skipped.
std::unique_ptr<RegistrationCache> CacheOrSkip(FakeRegistrar& registrar, size_t capacity,
                                               bool write_protect = true) {
  absl::StatusOr<std::shared_ptr<UnmapMonitor>> monitor;
  if (write_protect) {
    monitor = UnmapMonitor::ForProcess();
  } else {
    UnmapMonitor::Options options;
    options.allow_write_protect_mode = false;
    monitor = UnmapMonitor::Create(options);
  }
  if (!monitor.ok()) {
    WARN("SKIPPED: unmaps cannot be watched here, so nothing is cached: "
         << ErrorText(monitor.status())
         << " (/proc/sys/vm/unprivileged_userfaultfd: " << UnprivilegedSetting() << ")");
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<RegistrationCache>> cache =
      RegistrationCache::CreateWithMonitor(registrar, capacity, *std::move(monitor));
  REQUIRE(cache.ok());
  REQUIRE((*cache)->caching());
  return *std::move(cache);
}

// Anonymous memory, unmapped on destruction unless already unmapped.
class Mapping {
 public:
  explicit Mapping(size_t bytes) : bytes_(bytes) {
    void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(memory != MAP_FAILED);
    base_ = static_cast<uint8_t*>(memory);
    std::memset(base_, 1, bytes);
  }
  ~Mapping() {
    if (mapped_) munmap(base_, bytes_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  uint8_t* get() const { return base_; }
  uint8_t* page(size_t index) const { return base_ + index * kPage; }
  uintptr_t address(size_t page_index = 0) const {
    return reinterpret_cast<uintptr_t>(page(page_index));
  }

  void Unmap() {
    REQUIRE(munmap(base_, bytes_) == 0);
    mapped_ = false;
  }

  // Unmaps the memory and maps new memory at the same address; false if something else took
  // the address in between (a sanitizer's runtime may map memory at any time).
  bool Replace() {
    const int unmapped = munmap(base_, bytes_);
    void* memory = mmap(base_, bytes_, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    REQUIRE(unmapped == 0);
    if (memory == base_) {
      std::memset(base_, 2, bytes_);
      return true;
    }
    if (memory != MAP_FAILED) munmap(memory, bytes_);
    mapped_ = false;
    return false;
  }

 private:
  uint8_t* base_ = nullptr;
  size_t bytes_;
  bool mapped_ = true;
};

// Runs `scenario` (false: its memory could not be mapped again at the same address) until it
// completes, a bounded number of times.
template <typename Scenario>
void WithAddressRetries(Scenario scenario) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (scenario()) return;
  }
  WARN("SKIPPED: the address of unmapped memory was taken by other mappings 5 times");
}

RegistrationCache::Lease AcquireOk(RegistrationCache& cache, const void* address, size_t bytes) {
  absl::StatusOr<RegistrationCache::Lease> lease = cache.Acquire(address, bytes);
  INFO(ErrorText(lease.status()));
  REQUIRE(lease.ok());
  REQUIRE_FALSE(lease->empty());
  return *std::move(lease);
}

TEST_CASE("a miss registers whole pages and a range inside a kept registration hits") {
  FakeRegistrar registrar;
  std::unique_ptr<RegistrationCache> cache = CacheOrSkip(registrar, 1 << 20);
  if (cache == nullptr) return;
  Mapping memory(16 * kPage);

  RegistrationCache::Lease first = AcquireOk(*cache, memory.get() + 100, 50);
  CHECK(first.region().start == memory.address());
  CHECK(first.region().bytes == kPage);
  CHECK(first.rkey() == first.lkey() + 1000000);
  RegistrationCache::Lease inside = AcquireOk(*cache, memory.get() + 200, 10);
  CHECK(inside.lkey() == first.lkey());
  // No bytes: the page of the address.
  RegistrationCache::Lease empty = AcquireOk(*cache, memory.get() + kPage - 1, 0);
  CHECK(empty.lkey() == first.lkey());
  RegistrationCache::Stats stats = cache->stats();
  CHECK(stats.misses == 1);
  CHECK(stats.hits == 2);
  CHECK(stats.entries == 1);
  CHECK(stats.registered_bytes == kPage);

  // Across a page boundary: pages 1-2, a registration of their own.
  RegistrationCache::Lease straddling = AcquireOk(*cache, memory.page(2) - 1, 2);
  CHECK(straddling.region().start == memory.address(1));
  CHECK(straddling.region().bytes == 2 * kPage);
  CHECK(straddling.lkey() != first.lkey());
  CHECK(registrar.registered() == 2);

  // A range overlapping unleased registrations replaces them with one covering all of them.
  first.Release();
  inside.Release();
  empty.Release();
  straddling.Release();
  CHECK(first.empty());
  RegistrationCache::Lease wider = AcquireOk(*cache, memory.get() + 10, 2 * kPage);
  CHECK(wider.region().start == memory.address());
  CHECK(wider.region().bytes == 3 * kPage);
  CHECK(registrar.live() == 1);
  CHECK(cache->stats().entries == 1);
  CHECK(AcquireOk(*cache, memory.page(2), kPage).lkey() == wider.lkey());
  CHECK(registrar.mistakes() == 0);
}

TEST_CASE("leases move, release early and reject unusable ranges") {
  FakeRegistrar registrar;
  std::unique_ptr<RegistrationCache> cache = CacheOrSkip(registrar, 0);
  if (cache == nullptr) return;
  Mapping memory(kPage);
  RegistrationCache::Lease lease = AcquireOk(*cache, memory.get(), 8);
  const uint32_t key = lease.lkey();
  RegistrationCache::Lease moved = std::move(lease);
  CHECK(lease.empty());  // NOLINT(bugprone-use-after-move): moved-from leases are empty
  CHECK(moved.lkey() == key);
  RegistrationCache::Lease assigned;
  CHECK(assigned.empty());
  assigned = std::move(moved);
  CHECK(registrar.Live(key));
  assigned.Release();
  // Capacity 0: nothing is kept once unleased.
  CHECK_FALSE(registrar.Live(key));
  assigned.Release();

  CHECK(GetErrorKind(cache->Acquire(nullptr, 8).status()) == ErrorKind::kInvalidArgument);
  const void* near_top = reinterpret_cast<const void*>(UINTPTR_MAX - 10);
  CHECK(GetErrorKind(cache->Acquire(near_top, 100).status()) == ErrorKind::kInvalidArgument);
  CHECK(registrar.mistakes() == 0);
}

TEST_CASE("beyond capacity the least recently used unleased registrations are deregistered") {
  FakeRegistrar registrar;
  std::unique_ptr<RegistrationCache> cache = CacheOrSkip(registrar, 3 * kPage);
  if (cache == nullptr) return;
  Mapping memory(8 * kPage);
  uint32_t keys[4];
  for (int i = 0; i < 3; ++i) keys[i] = AcquireOk(*cache, memory.page(i), kPage).lkey();
  CHECK(cache->stats().registered_bytes == 3 * kPage);
  // Page 0 used again: page 1 is now the least recently used.
  CHECK(AcquireOk(*cache, memory.page(0), kPage).lkey() == keys[0]);
  keys[3] = AcquireOk(*cache, memory.page(3), kPage).lkey();
  CHECK_FALSE(registrar.Live(keys[1]));
  CHECK(registrar.Live(keys[0]));
  CHECK(registrar.Live(keys[2]));
  CHECK(registrar.Live(keys[3]));
  RegistrationCache::Stats stats = cache->stats();
  CHECK(stats.evictions == 1);
  CHECK(stats.registered_bytes == 3 * kPage);
  CHECK(AcquireOk(*cache, memory.page(0), 1).lkey() == keys[0]);
  CHECK(registrar.mistakes() == 0);
}

TEST_CASE("a leased registration is never deregistered, whatever the capacity") {
  FakeRegistrar registrar;
  std::unique_ptr<RegistrationCache> cache = CacheOrSkip(registrar, 0);
  if (cache == nullptr) return;
  Mapping memory(4 * kPage);
  RegistrationCache::Lease held = AcquireOk(*cache, memory.page(0), kPage);
  for (int i = 1; i < 4; ++i) AcquireOk(*cache, memory.page(i), kPage);
  CHECK(registrar.live() == 1);
  CHECK(registrar.Live(held.lkey()));
  CHECK(cache->stats().registered_bytes == kPage);
  // Still found while leased, although over capacity.
  RegistrationCache::Lease again = AcquireOk(*cache, memory.page(0), 16);
  CHECK(again.lkey() == held.lkey());
  held.Release();
  CHECK(registrar.Live(again.lkey()));
  again.Release();
  CHECK(registrar.live() == 0);
  CHECK(cache->stats().evictions == 4);
  CHECK(registrar.mistakes() == 0);
}

TEST_CASE("memory unmapped and mapped again at the same address is registered again") {
  const bool write_protect = GENERATE(true, false);
  INFO("write-protect mode: " << write_protect);
  WithAddressRetries([&] {
    FakeRegistrar registrar;
    std::unique_ptr<RegistrationCache> cache = CacheOrSkip(registrar, 64 << 20, write_protect);
    if (cache == nullptr) return true;
    Mapping memory(1 << 20);

    const uint32_t old_key = AcquireOk(*cache, memory.get(), 1 << 20).lkey();
    CHECK(cache->stats().misses == 1);
    CHECK(AcquireOk(*cache, memory.get(), 1 << 20).lkey() == old_key);
    CHECK(cache->stats().hits == 1);

    // This thread unmaps, maps at the same address and acquires at once: no waiting anywhere.
    if (!memory.Replace()) return false;
    RegistrationCache::Lease fresh = AcquireOk(*cache, memory.get(), 1 << 20);
    CHECK(fresh.lkey() != old_key);
    CHECK_FALSE(registrar.Live(old_key));
    RegistrationCache::Stats stats = cache->stats();
    CHECK(stats.misses == 2);
    CHECK(stats.invalidations == 1);
    CHECK(stats.entries == 1);
    CHECK(stats.registered_bytes == size_t{1} << 20);
    CHECK(registrar.mistakes() == 0);
    return true;
  });
}

TEST_CASE("a registration invalidated while leased is deregistered when its lease ends") {
  WithAddressRetries([&] {
    FakeRegistrar registrar;
    std::unique_ptr<RegistrationCache> cache = CacheOrSkip(registrar, 64 << 20);
    if (cache == nullptr) return true;
    Mapping memory(1 << 20);
    RegistrationCache::Lease old_lease = AcquireOk(*cache, memory.get(), 4096);
    if (!memory.Replace()) return false;
    RegistrationCache::Lease fresh = AcquireOk(*cache, memory.get(), 4096);
    CHECK(fresh.lkey() != old_lease.lkey());
    CHECK(registrar.Live(old_lease.lkey()));
    CHECK(cache->stats().entries == 2);
    const uint32_t old_key = old_lease.lkey();
    old_lease.Release();
    CHECK_FALSE(registrar.Live(old_key));
    CHECK(registrar.Live(fresh.lkey()));
    CHECK(cache->stats().entries == 1);
    CHECK(registrar.mistakes() == 0);
    return true;
  });
}

TEST_CASE("a large block freed and allocated again at the same address is registered again") {
  FakeRegistrar registrar;
  std::unique_ptr<RegistrationCache> cache = CacheOrSkip(registrar, 256 << 20);
  if (cache == nullptr) return;
  // Above glibc's largest dynamic mmap threshold (32 MiB): always its own mapping, unmapped by
  // free() from inside glibc.
  const size_t bytes = 64 << 20;
  void* block = std::malloc(bytes);
  REQUIRE(block != nullptr);
  const uint32_t old_key = AcquireOk(*cache, block, bytes).lkey();
  CHECK(AcquireOk(*cache, block, bytes).lkey() == old_key);
  std::free(block);
  void* again = std::malloc(bytes);
  REQUIRE(again != nullptr);
  if (again != block) {
    WARN("SKIPPED: the allocator did not return the same address (not glibc's malloc?)");
    std::free(again);
    return;
  }
  CHECK(AcquireOk(*cache, again, bytes).lkey() != old_key);
  CHECK_FALSE(registrar.Live(old_key));
  CHECK(cache->stats().invalidations == 1);
  std::free(again);
  CHECK(registrar.mistakes() == 0);
}

TEST_CASE("madvise(MADV_DONTNEED) of part of a registration invalidates it") {
  const bool write_protect = GENERATE(true, false);
  INFO("write-protect mode: " << write_protect);
  FakeRegistrar registrar;
  std::unique_ptr<RegistrationCache> cache = CacheOrSkip(registrar, 64 << 20, write_protect);
  if (cache == nullptr) return;
  Mapping memory(16 * kPage);
  const uint32_t old_key = AcquireOk(*cache, memory.get(), 16 * kPage).lkey();
  REQUIRE(madvise(memory.page(4), 2 * kPage, MADV_DONTNEED) == 0);
  CHECK(memory.page(4)[0] == 0);
  CHECK(memory.page(3)[0] == 1);
  const uint32_t new_key = AcquireOk(*cache, memory.get(), 16 * kPage).lkey();
  CHECK(new_key != old_key);
  CHECK_FALSE(registrar.Live(old_key));
  CHECK(cache->stats().invalidations == 1);
  // Dropping memory that is not registered changes nothing.
  Mapping other(2 * kPage);
  REQUIRE(madvise(other.get(), 2 * kPage, MADV_DONTNEED) == 0);
  CHECK(AcquireOk(*cache, memory.page(8), kPage).lkey() == new_key);
  CHECK(registrar.mistakes() == 0);
}

TEST_CASE("without unmap watching every registration ends with its last lease") {
  FakeRegistrar registrar;
  absl::StatusOr<std::unique_ptr<RegistrationCache>> cache =
      RegistrationCache::Create(registrar, 64 << 20, /*watch_unmaps=*/false);
  REQUIRE(cache.ok());
  CHECK_FALSE((*cache)->caching());
  Mapping memory(4 * kPage);
  RegistrationCache::Lease first = AcquireOk(**cache, memory.get(), kPage);
  RegistrationCache::Lease second = AcquireOk(**cache, memory.get(), kPage);
  CHECK(first.lkey() != second.lkey());
  const uint32_t key = first.lkey();
  first.Release();
  CHECK_FALSE(registrar.Live(key));
  second.Release();
  CHECK(registrar.live() == 0);
  RegistrationCache::Stats stats = (*cache)->stats();
  CHECK(stats.misses == 2);
  CHECK(stats.uncached == 2);
  CHECK(stats.entries == 0);
  CHECK(registrar.mistakes() == 0);
}

TEST_CASE("memory that cannot be watched is registered but not kept") {
  FakeRegistrar registrar;
  std::unique_ptr<RegistrationCache> cache = CacheOrSkip(registrar, 64 << 20);
  if (cache == nullptr) return;
  FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  REQUIRE(ftruncate(fileno(file), static_cast<off_t>(4 * kPage)) == 0);
  void* mapped = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, fileno(file), 0);
  REQUIRE(mapped != MAP_FAILED);
  uint32_t key = 0;
  {
    RegistrationCache::Lease lease = AcquireOk(*cache, mapped, 4 * kPage);
    key = lease.lkey();
    CHECK(registrar.Live(key));
  }
  CHECK_FALSE(registrar.Live(key));
  CHECK(AcquireOk(*cache, mapped, 4 * kPage).lkey() != key);
  CHECK(cache->stats().uncached == 2);
  CHECK(cache->stats().hits == 0);
  REQUIRE(munmap(mapped, 4 * kPage) == 0);
  std::fclose(file);
  CHECK(registrar.mistakes() == 0);
}

TEST_CASE("caches of two devices keep the same buffer (one monitor per process)") {
  WithAddressRetries([&] {
    FakeRegistrar first_device;
    FakeRegistrar second_device;
    std::unique_ptr<RegistrationCache> first = CacheOrSkip(first_device, 64 << 20);
    if (first == nullptr) return true;
    absl::StatusOr<std::unique_ptr<RegistrationCache>> second =
        RegistrationCache::Create(second_device, 64 << 20);
    REQUIRE(second.ok());
    Mapping memory(8 * kPage);
    const uint32_t first_key = AcquireOk(*first, memory.get(), 8 * kPage).lkey();
    const uint32_t second_key = AcquireOk(**second, memory.get(), 8 * kPage).lkey();
    CHECK(AcquireOk(*first, memory.get(), 8 * kPage).lkey() == first_key);
    CHECK(AcquireOk(**second, memory.get(), 8 * kPage).lkey() == second_key);
    CHECK((*second)->stats().uncached == 0);
    // One cache dropping its registration does not stop the watch the other relies on.
    first.reset();
    if (!memory.Replace()) return false;
    CHECK(AcquireOk(**second, memory.get(), 8 * kPage).lkey() != second_key);
    CHECK_FALSE(second_device.Live(second_key));
    return true;
  });
}

TEST_CASE("a registrar failure is returned and leaves nothing behind") {
  FakeRegistrar registrar;
  std::unique_ptr<RegistrationCache> cache = CacheOrSkip(registrar, 64 << 20);
  if (cache == nullptr) return;
  Mapping memory(4 * kPage);
  registrar.fail_next = true;
  absl::StatusOr<RegistrationCache::Lease> failed = cache->Acquire(memory.get(), kPage);
  CHECK(GetErrorKind(failed.status()) == ErrorKind::kInternal);
  CHECK(cache->stats().entries == 0);
  const uint32_t key = AcquireOk(*cache, memory.get(), kPage).lkey();
  CHECK(AcquireOk(*cache, memory.get(), kPage).lkey() == key);

  // Unmapped memory: the registrar refuses it.
  Mapping gone(2 * kPage);
  gone.Unmap();
  CHECK_FALSE(cache->Acquire(gone.get(), kPage).ok());
  CHECK(cache->stats().entries == 1);
  CHECK(registrar.mistakes() == 0);
}

TEST_CASE("the registrar is called without the cache's mutex held") {
  FakeRegistrar registrar;
  std::unique_ptr<RegistrationCache> cache = CacheOrSkip(registrar, 64 << 20);
  if (cache == nullptr) return;
  int calls = 0;
  // Would deadlock if the mutex were held.
  registrar.on_register = [&] {
    ++calls;
    cache->stats();
  };
  Mapping memory(2 * kPage);
  AcquireOk(*cache, memory.get(), kPage);
  CHECK(calls == 1);
  registrar.on_register = nullptr;
}

TEST_CASE("threads acquiring while another unmaps and maps again never get a stale registration") {
  FakeRegistrar registrar;
  registrar.read_generation = true;
  std::unique_ptr<RegistrationCache> cache = CacheOrSkip(registrar, 48 * kPage);
  if (cache == nullptr) return;

  constexpr int kBuffers = 4;
  constexpr size_t kBufferPages = 16;
  const size_t kBytes = kBufferPages * kPage;
  struct Buffer {
    std::shared_mutex mu;  // shared: acquiring; exclusive: replacing the memory
    // Set while the replacer waits for `mu`: glibc's rwlock prefers readers, so without this
    // gate four acquiring threads could hold the replacer off until they had finished.
    std::atomic<bool> replacing{false};
    uint8_t* base = nullptr;
    uint64_t generation = 1;
  };
  Buffer buffers[kBuffers];
  // Each page's first word: the generation of the memory mapped there, written once when the
  // page is new. A registration is stale if the word at its start differs from the one it saw.
  auto stamp = [&](Buffer& buffer, size_t pages) {
    for (size_t page = 0; page < pages; ++page) {
      *reinterpret_cast<uint64_t*>(buffer.base + page * kPage) = buffer.generation;
    }
  };
  for (Buffer& buffer : buffers) {
    void* memory =
        mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(memory != MAP_FAILED);
    buffer.base = static_cast<uint8_t*>(memory);
    stamp(buffer, kBufferPages);
  }

  constexpr int kFewestAcquires = 2000;
  constexpr int kMostAcquires = 200000;
  std::atomic<int> stale{0};
  std::atomic<int> failures{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 random(t);
      RegistrationCache::Lease kept;  // sometimes held past the memory's replacement
      // Acquiring goes on until the replacer is done, so that replacements meet live entries.
      for (int i = 0; i < kMostAcquires && (i < kFewestAcquires || !done); ++i) {
        Buffer& buffer = buffers[random() % kBuffers];
        while (buffer.replacing) std::this_thread::yield();
        std::shared_lock<std::shared_mutex> lock(buffer.mu);
        const size_t offset = random() % kBytes;
        const size_t bytes = 1 + random() % (kBytes - offset);
        absl::StatusOr<RegistrationCache::Lease> lease =
            cache->Acquire(buffer.base + offset, bytes);
        if (!lease.ok()) {
          ++failures;
          continue;
        }
        // The registration covers the range and was made of the memory mapped there now.
        const MemoryRegion& region = lease->region();
        const uintptr_t first = reinterpret_cast<uintptr_t>(buffer.base) + offset;
        const uint64_t current = *reinterpret_cast<const uint64_t*>(region.start);
        if (registrar.Get(lease->lkey()).generation != current || region.start > first ||
            region.start + region.bytes < first + bytes) {
          ++stale;
        }
        if (random() % 4 == 0) kept = *std::move(lease);
      }
    });
  }
  std::thread replacer([&] {
    std::mt19937 random(99);
    for (int i = 0; i < 200; ++i) {
      Buffer& buffer = buffers[random() % kBuffers];
      buffer.replacing = true;
      std::unique_lock<std::shared_mutex> lock(buffer.mu);
      buffer.replacing = false;
      ++buffer.generation;
      if (random() % 3 == 0) {
        // New pages in the first half only.
        madvise(buffer.base, kBytes / 2, MADV_DONTNEED);
        stamp(buffer, kBufferPages / 2);
      } else {
        munmap(buffer.base, kBytes);
        void* memory = mmap(buffer.base, kBytes, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (memory == MAP_FAILED) {
          memory =
              mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        }
        if (memory == MAP_FAILED) {
          ++failures;
          break;
        }
        buffer.base = static_cast<uint8_t*>(memory);
        stamp(buffer, kBufferPages);
      }
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    done = true;
  });
  for (std::thread& thread : threads) thread.join();
  replacer.join();
  CHECK(done);
  CHECK(stale == 0);
  CHECK(failures == 0);
  const RegistrationCache::Stats stats = cache->stats();
  INFO("hits " << stats.hits << ", misses " << stats.misses << ", invalidations "
               << stats.invalidations << ", evictions " << stats.evictions);
  CHECK(stats.hits > 0);
  CHECK(stats.invalidations > 0);
  CHECK(stats.registered_bytes <= 48 * kPage);
  cache.reset();
  CHECK(registrar.live() == 0);
  CHECK(registrar.mistakes() == 0);
  for (Buffer& buffer : buffers) munmap(buffer.base, kBytes);
}

}  // namespace
}  // namespace chorus::ibverbs
