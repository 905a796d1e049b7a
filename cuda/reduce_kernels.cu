#include <cuda_runtime.h>

#include <cstdint>

#include "chorus/core/reduce_element.h"
#include "chorus/cuda/reduce_kernels.h"

namespace chorus {
namespace cuda_kernels {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU several times over; the loops stride past it.
constexpr size_t kMaxBlocks = 4096;

template <typename T>
using StorageOf = typename ElementCodec<T>::Storage;

// Elements per 16-byte vector.
template <typename T>
constexpr int kLanes = static_cast<int>(sizeof(uint4) / sizeof(StorageOf<T>));

template <typename T>
union Vector {
  uint4 raw;
  StorageOf<T> lanes[kLanes<T>];
};

// `vectors` 16-byte vectors first (0 when a pointer is unaligned), then the rest one element per
// thread.
template <typename T, typename Op>
__global__ void ReduceKernel(const StorageOf<T>* a, const StorageOf<T>* b, StorageOf<T>* dst,
                             size_t count, size_t vectors) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (size_t v = first; v < vectors; v += stride) {
    Vector<T> x, y, out;
    x.raw = reinterpret_cast<const uint4*>(a)[v];
    y.raw = reinterpret_cast<const uint4*>(b)[v];
#pragma unroll
    for (int lane = 0; lane < kLanes<T>; ++lane) {
      out.lanes[lane] = CombineElement<T, Op>(x.lanes[lane], y.lanes[lane]);
    }
    reinterpret_cast<uint4*>(dst)[v] = out.raw;
  }
  for (size_t i = vectors * kLanes<T> + first; i < count; i += stride) {
    dst[i] = CombineElement<T, Op>(a[i], b[i]);
  }
}

template <typename T>
__global__ void DivideKernel(StorageOf<T>* data, size_t count, int divisor) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    data[i] = DivideElement<T>(data[i], divisor);
  }
}

unsigned BlocksFor(size_t work_items) {
  const size_t blocks = (work_items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % sizeof(uint4) == 0; }

}  // namespace

int LaunchReduce(DataType type, ReduceOp op, const void* a, const void* b, void* dst,
                 size_t count, void* stream) {
  if (count == 0) return cudaSuccess;
  const bool aligned = Aligned16(a) && Aligned16(b) && Aligned16(dst);
  VisitDataType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = StorageOf<T>;
    const size_t vectors = aligned ? count / kLanes<T> : 0;
    const unsigned blocks = BlocksFor(vectors > 0 ? vectors : count);
    VisitReduceOp(op, [&](auto op_tag) {
      using Op = decltype(op_tag);
      ReduceKernel<T, Op><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<const S*>(a), static_cast<const S*>(b), static_cast<S*>(dst), count,
          vectors);
    });
  });
  return cudaGetLastError();
}

int LaunchDivide(DataType type, void* data, size_t count, int divisor, void* stream) {
  if (count == 0) return cudaSuccess;
  VisitDataType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    DivideKernel<T><<<BlocksFor(count), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<StorageOf<T>*>(data), count, divisor);
  });
  return cudaGetLastError();
}

}  // namespace cuda_kernels
}  // namespace chorus
