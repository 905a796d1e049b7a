// The pinned pool over the host stand-in: blocks are rounded, reused, bounded, and freed.
#include "chorus/cuda/pinned_pool.h"

#include <catch2/catch.hpp>

#include "tests/cuda/host_gpu_runtime.h"

namespace chorus::testing {
namespace {

TEST_CASE("pinned blocks are rounded to a power of two and reused", "[pinned]") {
  HostGpuRuntime runtime;
  PinnedPool pool(runtime, size_t{8} << 20);
  CHECK(PinnedPool::BlockBytes(1) == PinnedPool::kMinBlockBytes);
  CHECK(PinnedPool::BlockBytes((size_t{1} << 20) + 1) == size_t{2} << 20);
  void* first = nullptr;
  {
    absl::StatusOr<PinnedPool::Block> block = pool.Take(100000);
    REQUIRE(block.ok());
    CHECK(block->size() == 128 * 1024);
    first = block->data();
  }
  CHECK(pool.cached_bytes() == 128 * 1024);
  absl::StatusOr<PinnedPool::Block> again = pool.Take(70000);
  REQUIRE(again.ok());
  CHECK(again->data() == first);
  CHECK(runtime.pinned_allocations() == 1);
  absl::StatusOr<PinnedPool::Block> empty = pool.Take(0);
  REQUIRE(empty.ok());
  CHECK(empty->data() == nullptr);
}

TEST_CASE("the cache is bounded: the largest blocks go first, oversized ones are freed",
          "[pinned]") {
  HostGpuRuntime runtime;
  {
    PinnedPool pool(runtime, size_t{1} << 20);
    {
      auto a = pool.Take(size_t{512} << 10);
      auto b = pool.Take(size_t{256} << 10);
      auto c = pool.Take(size_t{512} << 10);
      REQUIRE((a.ok() && b.ok() && c.ok()));
    }
    // 512 + 256 KiB fit; the second 512 KiB evicted the first.
    CHECK(pool.cached_bytes() <= size_t{1} << 20);
    CHECK(runtime.pinned_blocks_live() == 2);
    {
      auto huge = pool.Take(size_t{4} << 20);
      REQUIRE(huge.ok());
    }
    CHECK(runtime.pinned_blocks_live() == 2);  // the 4 MiB block was freed, not cached
  }
  CHECK(runtime.pinned_blocks_live() == 0);  // the pool freed its cache
}

}  // namespace
}  // namespace chorus::testing
