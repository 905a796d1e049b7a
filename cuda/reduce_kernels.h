// The device reduction kernels: dst = a op b and data /= divisor over every Chorus type,
// grid-stride loops with 16-byte loads and stores when all pointers are 16-byte aligned. Each
// element goes through core/reduce_element.h, the same definition the host kernels use.
// Compiled by nvcc (reduce_kernels.cu); callers need no CUDA headers.
#ifndef CHORUS_CUDA_REDUCE_KERNELS_H_
#define CHORUS_CUDA_REDUCE_KERNELS_H_

#include <cstddef>

#include "chorus/core/data_type.h"

namespace chorus {
namespace cuda_kernels {

// Launch on `stream` (a cudaStream_t; null: the legacy default stream) of the calling thread's
// current device. Return the launch's cudaError_t (0 is success); a kernel's own failure shows on
// the stream.
int LaunchReduce(DataType type, ReduceOp op, const void* a, const void* b, void* dst, size_t count,
                 void* stream);
int LaunchDivide(DataType type, void* data, size_t count, int divisor, void* stream);

}  // namespace cuda_kernels
}  // namespace chorus

#endif  // CHORUS_CUDA_REDUCE_KERNELS_H_
