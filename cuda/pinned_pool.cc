#include "chorus/cuda/pinned_pool.h"

#include <utility>

namespace chorus {

PinnedPool::Block& PinnedPool::Block::operator=(Block&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = std::exchange(other.pool_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void PinnedPool::Block::Release() {
  if (pool_ != nullptr && data_ != nullptr) pool_->Return(data_, size_);
  pool_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

PinnedPool::~PinnedPool() {
  for (auto& [size, blocks] : free_) {
    for (void* block : blocks) runtime_.FreePinned(block);
  }
}

size_t PinnedPool::BlockBytes(size_t bytes) {
  size_t block = kMinBlockBytes;
  while (block < bytes) block <<= 1;
  return block;
}

absl::StatusOr<PinnedPool::Block> PinnedPool::Take(size_t bytes) {
  if (bytes == 0) return Block();
  const size_t size = BlockBytes(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* data = it->second.back();
      it->second.pop_back();
      cached_ -= size;
      return Block(this, data, size);
    }
  }
  absl::StatusOr<void*> data = runtime_.AllocatePinned(size);
  if (!data.ok()) return data.status();
  return Block(this, *data, size);
}

void PinnedPool::Return(void* data, size_t size) {
  std::vector<void*> to_free;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Evict the largest cached blocks until this one fits; a block larger than the whole cache is
    // freed instead.
    while (cached_ + size > limit_ && !free_.empty() && size <= limit_) {
      auto largest = std::prev(free_.end());
      if (largest->second.empty()) {
        free_.erase(largest);
        continue;
      }
      to_free.push_back(largest->second.back());
      largest->second.pop_back();
      cached_ -= largest->first;
    }
    if (cached_ + size <= limit_) {
      free_[size].push_back(data);
      cached_ += size;
    } else {
      to_free.push_back(data);
    }
  }
  for (void* block : to_free) runtime_.FreePinned(block);
}

size_t PinnedPool::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

}  // namespace chorus
