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

// The inputs one launch folds, passed by value (kernel parameters live in constant memory).
constexpr int kMaxInputs = 16;
struct Inputs {
  const void* at[kMaxInputs];
};

// `vectors` 16-byte vectors first (0 when a pointer is unaligned), then the rest one element per
// thread. Every element reads its inputs before it writes dst, so dst may be the first input.
template <typename T, typename Op>
__global__ void ReduceKernel(Inputs inputs, int inputs_count, StorageOf<T>* dst, size_t count,
                             size_t vectors, int divisor) {
  using S = StorageOf<T>;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (size_t v = first; v < vectors; v += stride) {
    Vector<T> result;
    result.raw = static_cast<const uint4*>(inputs.at[0])[v];
    for (int k = 1; k < inputs_count; ++k) {
      Vector<T> x;
      x.raw = static_cast<const uint4*>(inputs.at[k])[v];
#pragma unroll
      for (int lane = 0; lane < kLanes<T>; ++lane) {
        result.lanes[lane] = CombineElement<T, Op>(result.lanes[lane], x.lanes[lane]);
      }
    }
    if (divisor > 0) {
#pragma unroll
      for (int lane = 0; lane < kLanes<T>; ++lane) {
        result.lanes[lane] = DivideElement<T>(result.lanes[lane], divisor);
      }
    }
    reinterpret_cast<uint4*>(dst)[v] = result.raw;
  }
  for (size_t i = vectors * kLanes<T> + first; i < count; i += stride) {
    S result = static_cast<const S*>(inputs.at[0])[i];
    for (int k = 1; k < inputs_count; ++k) {
      result = CombineElement<T, Op>(result, static_cast<const S*>(inputs.at[k])[i]);
    }
    dst[i] = divisor > 0 ? DivideElement<T>(result, divisor) : result;
  }
}

unsigned BlocksFor(size_t work_items) {
  const size_t blocks = (work_items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % sizeof(uint4) == 0; }

// One launch over `inputs`, all of them aligned or not.
int LaunchOne(DataType type, ReduceOp op, const Inputs& inputs, int inputs_count, void* dst,
              size_t count, int divisor, void* stream) {
  bool aligned = Aligned16(dst);
  for (int k = 0; k < inputs_count; ++k) aligned = aligned && Aligned16(inputs.at[k]);
  VisitDataType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const size_t vectors = aligned ? count / kLanes<T> : 0;
    const unsigned blocks = BlocksFor(vectors > 0 ? vectors : count);
    VisitReduceOp(op, [&](auto op_tag) {
      using Op = decltype(op_tag);
      ReduceKernel<T, Op><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
          inputs, inputs_count, static_cast<StorageOf<T>*>(dst), count, vectors, divisor);
    });
  });
  return cudaGetLastError();
}

}  // namespace

int LaunchReduce(DataType type, ReduceOp op, const void* const* inputs, int inputs_count, void* dst,
                 size_t count, int divisor, void* stream) {
  if (count == 0 || inputs_count < 1) return cudaSuccess;
  // The first launch takes up to kMaxInputs inputs; each later one folds dst (the result so far)
  // with up to kMaxInputs - 1 more, in order. Only the last one divides.
  int next = 0;
  while (next < inputs_count) {
    Inputs batch{};
    int taken = 0;
    if (next > 0) batch.at[taken++] = dst;
    while (taken < kMaxInputs && next < inputs_count) batch.at[taken++] = inputs[next++];
    const int error =
        LaunchOne(type, op, batch, taken, dst, count, next == inputs_count ? divisor : 0, stream);
    if (error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

}  // namespace cuda_kernels
}  // namespace chorus
