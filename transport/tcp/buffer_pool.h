// Buffers for messages that arrive before their receive is posted, kept for reuse.
//
// Algorithms that pipeline (rings, trees) routinely have a few segments in flight ahead of
// the receives they post, so unexpected messages of the same size come and go many times per
// collective. Fresh heap memory for each costs a page fault per 4 KiB when the kernel copies
// into it (the allocator returns freed pages to the system); on a virtual machine that is
// most of the cost of the message. The pool keeps freed buffers, up to a byte budget, and
// hands them out again for messages of similar size.
#ifndef CHORUS_TRANSPORT_TCP_BUFFER_POOL_H_
#define CHORUS_TRANSPORT_TCP_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace chorus::tcp {

class BufferPool;

// A buffer from a BufferPool; returns itself to the pool when destroyed or reset.
class PooledBuffer {
 public:
  PooledBuffer() = default;
  ~PooledBuffer() { reset(); }
  PooledBuffer(PooledBuffer&& other) noexcept { *this = std::move(other); }
  PooledBuffer& operator=(PooledBuffer&& other) noexcept;
  PooledBuffer(const PooledBuffer&) = delete;
  PooledBuffer& operator=(const PooledBuffer&) = delete;

  uint8_t* get() const { return data_; }
  size_t capacity() const { return capacity_; }
  explicit operator bool() const { return data_ != nullptr; }
  bool operator==(std::nullptr_t) const { return data_ == nullptr; }
  bool operator!=(std::nullptr_t) const { return data_ != nullptr; }
  void reset();

 private:
  friend class BufferPool;
  PooledBuffer(std::shared_ptr<BufferPool> pool, uint8_t* data, size_t capacity)
      : pool_(std::move(pool)), data_(data), capacity_(capacity) {}

  std::shared_ptr<BufferPool> pool_;
  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
};

// Thread-safe.
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // Keeps at most `max_cached_bytes` of free buffers; buffers larger than that are never kept.
  static std::shared_ptr<BufferPool> Create(size_t max_cached_bytes);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `size` bytes (a cached one of at most twice that size if there is
  // one); an empty buffer when memory is exhausted.
  PooledBuffer Take(size_t size);

  size_t cached_bytes() const;

 private:
  struct FreeBuffer {
    uint8_t* data;
    size_t capacity;
  };
  friend class PooledBuffer;
  explicit BufferPool(size_t max_cached_bytes) : max_cached_bytes_(max_cached_bytes) {}
  void Give(uint8_t* data, size_t capacity);

  const size_t max_cached_bytes_;
  mutable std::mutex mu_;
  std::vector<FreeBuffer> free_;  // guarded by mu_
  size_t cached_bytes_ = 0;       // guarded by mu_
};

}  // namespace chorus::tcp

#endif  // CHORUS_TRANSPORT_TCP_BUFFER_POOL_H_
