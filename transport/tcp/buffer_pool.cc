#include "chorus/transport/tcp/buffer_pool.h"

#include <algorithm>
#include <new>
#include <utility>

namespace chorus::tcp {

PooledBuffer& PooledBuffer::operator=(PooledBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = std::move(other.pool_);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

void PooledBuffer::reset() {
  if (data_ == nullptr) return;
  pool_->Give(std::exchange(data_, nullptr), std::exchange(capacity_, 0));
  pool_.reset();
}

std::shared_ptr<BufferPool> BufferPool::Create(size_t max_cached_bytes) {
  return std::shared_ptr<BufferPool>(new BufferPool(max_cached_bytes));
}

BufferPool::~BufferPool() {
  for (const FreeBuffer& buffer : free_) delete[] buffer.data;
}

PooledBuffer BufferPool::Take(size_t size) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The smallest cached buffer that fits, if it wastes at most half of itself. The newest
    // first, stopping at one of exactly the size: a rank running ahead of its peers leaves
    // many unexpected messages of one size, so the list is long and mostly that size.
    auto best = free_.end();
    for (auto it = free_.end(); it != free_.begin();) {
      --it;
      if (it->capacity >= size && it->capacity / 2 <= size &&
          (best == free_.end() || it->capacity < best->capacity)) {
        best = it;
        if (it->capacity == size) break;
      }
    }
    if (best != free_.end()) {
      const FreeBuffer found = *best;
      *best = free_.back();
      free_.pop_back();
      cached_bytes_ -= found.capacity;
      return PooledBuffer(shared_from_this(), found.data, found.capacity);
    }
  }
  uint8_t* data = new (std::nothrow) uint8_t[std::max<size_t>(size, 1)];
  if (data == nullptr) return PooledBuffer();
  return PooledBuffer(shared_from_this(), data, size);
}

void BufferPool::Give(uint8_t* data, size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  // Over budget: drop the largest cached buffers first, keeping the common small sizes.
  while (!free_.empty() && cached_bytes_ + capacity > max_cached_bytes_) {
    auto largest = std::max_element(
        free_.begin(), free_.end(),
        [](const FreeBuffer& a, const FreeBuffer& b) { return a.capacity < b.capacity; });
    if (largest->capacity <= capacity) break;
    cached_bytes_ -= largest->capacity;
    delete[] largest->data;
    *largest = free_.back();
    free_.pop_back();
  }
  if (cached_bytes_ + capacity > max_cached_bytes_) {
    delete[] data;
    return;
  }
  free_.push_back({data, capacity});
  cached_bytes_ += capacity;
}

size_t BufferPool::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_bytes_;
}

}  // namespace chorus::tcp
