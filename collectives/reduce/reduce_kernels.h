// Element-wise reduction kernels, one per (data type, op), vectorised. The AVX2 + F16C set is
// chosen at run time when the CPU has it (__builtin_cpu_supports); otherwise the baseline set
// (x86-64-v2: SSE4.2), compiled from the same loops. float16 and bfloat16 are widened to float
// in registers and rounded once on store (round to nearest, ties to even).
//
// Integer sum and prod wrap around (two's complement); min and max of floats return the second
// operand when either is NaN (the semantics of minps/maxps), identically in every kernel set.
#ifndef CHORUS_COLLECTIVES_REDUCE_REDUCE_KERNELS_H_
#define CHORUS_COLLECTIVES_REDUCE_REDUCE_KERNELS_H_

#include <cstddef>

#include "absl/strings/string_view.h"
#include "chorus/core/types.h"

namespace chorus {

// dst[i] = a[i] op b[i] for i in [0, count). `dst` may be exactly `a` or exactly `b`; no
// other overlap. kAvg combines like kSum: the division happens once, in DivideBuffer.
// Thread-safe (pure function).
void ReduceBuffers(DataType type, ReduceOp op, const void* a, const void* b, void* dst,
                   size_t count);

// data[i] /= divisor: integers truncate toward zero, floating types round once.
void DivideBuffer(DataType type, void* data, size_t count, int divisor);

// The kernel set in use: "avx2+f16c" or "baseline"; for logs and docs.
absl::string_view ReduceKernelSet();

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_REDUCE_REDUCE_KERNELS_H_
