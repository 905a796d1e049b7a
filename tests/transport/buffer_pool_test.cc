// The TCP transport's pool of unexpected-message buffers.
#include "chorus/transport/tcp/buffer_pool.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <thread>
#include <vector>

namespace chorus::tcp {
namespace {

TEST_CASE("a returned buffer is handed out again for a message of similar size") {
  auto pool = BufferPool::Create(1 << 20);
  uint8_t* first = nullptr;
  {
    PooledBuffer buffer = pool->Take(256 << 10);
    REQUIRE(buffer != nullptr);
    CHECK(buffer.capacity() == (256 << 10));
    std::memset(buffer.get(), 7, 256 << 10);
    first = buffer.get();
  }
  CHECK(pool->cached_bytes() == (256 << 10));
  PooledBuffer again = pool->Take(200 << 10);
  CHECK(again.get() == first);
  CHECK(pool->cached_bytes() == 0);
}

TEST_CASE("a cached buffer more than twice the size asked for is not used") {
  auto pool = BufferPool::Create(1 << 20);
  pool->Take(256 << 10).reset();
  PooledBuffer small = pool->Take(1000);
  CHECK(small.capacity() == 1000);
  CHECK(pool->cached_bytes() == (256 << 10));
}

TEST_CASE("the pool keeps no more than its budget, dropping the largest buffers first") {
  auto pool = BufferPool::Create(300 << 10);
  {
    PooledBuffer large = pool->Take(256 << 10);
    PooledBuffer small = pool->Take(64 << 10);
    PooledBuffer medium = pool->Take(128 << 10);
  }
  // Released in reverse order: medium (128K), small (64K), then large does not fit.
  CHECK(pool->cached_bytes() == (192 << 10));
  PooledBuffer too_large = pool->Take(400 << 10);
  too_large.reset();
  CHECK(pool->cached_bytes() == (192 << 10));
}

TEST_CASE("moving a buffer transfers ownership once") {
  auto pool = BufferPool::Create(1 << 20);
  PooledBuffer a = pool->Take(4096);
  uint8_t* data = a.get();
  PooledBuffer b = std::move(a);
  CHECK(a == nullptr);
  CHECK(b.get() == data);
  b = PooledBuffer();
  CHECK(pool->cached_bytes() == 4096);
}

TEST_CASE("buffers outlive the last reference to their pool and may be freed on any thread") {
  std::vector<PooledBuffer> buffers;
  {
    auto pool = BufferPool::Create(1 << 20);
    for (int i = 0; i < 8; ++i) buffers.push_back(pool->Take(4096 * (i + 1)));
  }
  std::thread releaser([&] { buffers.clear(); });
  releaser.join();
  CHECK(buffers.empty());
}

}  // namespace
}  // namespace chorus::tcp
