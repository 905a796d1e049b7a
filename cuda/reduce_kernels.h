// The device reduction kernel: dst = inputs[0] op inputs[1] op ... (divided by a divisor for the
// average) over every Chorus type, one pass that reads each input once and writes dst once;
// grid-stride loops with 16-byte loads and stores when all pointers are 16-byte aligned. Each
// element goes through core/reduce_element.h, the same definition the host kernels use, combined
// in input order and rounded to the type at each step, so the bits equal the host kernels'
// pairwise result. Compiled by nvcc (reduce_kernels.cu); callers need no CUDA headers.
#ifndef CHORUS_CUDA_REDUCE_KERNELS_H_
#define CHORUS_CUDA_REDUCE_KERNELS_H_

#include <cstddef>

#include "chorus/core/data_type.h"

namespace chorus {
namespace cuda_kernels {

// Launch on `stream` (a cudaStream_t; null: the legacy default stream) of the calling thread's
// current device. Return the launch's cudaError_t (0 is success); a kernel's own failure shows on
// the stream.
// `inputs` (`inputs_count` >= 1) and `dst` may be the first input. `divisor` > 0 divides each
// result by it (the average's last step); 0 leaves it. More inputs than one kernel takes run as
// several launches, each folding the previous result in first.
int LaunchReduce(DataType type, ReduceOp op, const void* const* inputs, int inputs_count, void* dst,
                 size_t count, int divisor, void* stream);

}  // namespace cuda_kernels
}  // namespace chorus

#endif  // CHORUS_CUDA_REDUCE_KERNELS_H_
