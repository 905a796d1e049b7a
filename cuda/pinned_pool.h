// Pinned (page-locked) host blocks for staging GPU buffers, kept for reuse: pinning costs
// milliseconds per allocation, far more than the copies it serves. Sizes are rounded up to a power
// of two (at least 64 KiB) so that calls of similar sizes share blocks. At most `cache_bytes` stay
// cached while unused; a returned block that does not fit evicts the largest cached ones, or is
// freed.
//
// Thread-safe. Blocks must not outlive their pool.
#ifndef CHORUS_CUDA_PINNED_POOL_H_
#define CHORUS_CUDA_PINNED_POOL_H_

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "chorus/cuda/gpu_runtime.h"

namespace chorus {

class PinnedPool {
 public:
  // A block taken from the pool; goes back when destroyed. Move-only.
  class Block {
   public:
    Block() = default;
    Block(Block&& other) noexcept { *this = std::move(other); }
    Block& operator=(Block&& other) noexcept;
    ~Block() { Release(); }

    void* data() const { return data_; }
    size_t size() const { return size_; }
    // Keeps the memory out of the pool for good (it is never freed): for a block that a copy
    // which could not be waited for may still write.
    void Abandon() {
      pool_ = nullptr;
      data_ = nullptr;
      size_ = 0;
    }

   private:
    friend class PinnedPool;
    Block(PinnedPool* pool, void* data, size_t size) : pool_(pool), data_(data), size_(size) {}
    void Release();

    PinnedPool* pool_ = nullptr;
    void* data_ = nullptr;
    size_t size_ = 0;
  };

  static constexpr size_t kMinBlockBytes = size_t{64} << 10;

  PinnedPool(GpuRuntime& runtime, size_t cache_bytes) : runtime_(runtime), limit_(cache_bytes) {}
  ~PinnedPool();  // frees the cached blocks
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // A block of at least `bytes` (an empty Block for 0); the runtime's error if pinning fails.
  absl::StatusOr<Block> Take(size_t bytes);

  // Bytes of unused blocks kept for reuse; for tests and logs.
  size_t cached_bytes() const;

  // The block size that serves a request of `bytes`.
  static size_t BlockBytes(size_t bytes);

 private:
  void Return(void* data, size_t size);

  GpuRuntime& runtime_;
  const size_t limit_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_ ABSL_GUARDED_BY(mu_);  // by block size
  size_t cached_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace chorus

#endif  // CHORUS_CUDA_PINNED_POOL_H_
