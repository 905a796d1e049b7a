// Everything an algorithm needs to know about one collective call, copied out of the caller's
// arguments (so an asynchronous call does not depend on spans the caller may free).
// How each kind's buffers follow from these fields is the shape table's (shape.h).
#ifndef CHORUS_COLLECTIVES_COLLECTIVE_ARGS_H_
#define CHORUS_COLLECTIVES_COLLECTIVE_ARGS_H_

#include <cstddef>
#include <vector>

#include "chorus/collectives/collective_kind.h"
#include "chorus/core/types.h"

namespace chorus {

// A value type; thread-compatible.
struct CollectiveArgs {
  CollectiveKind kind = CollectiveKind::kBarrier;
  DataType type = DataType::kUint8;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;
  const void* send = nullptr;
  void* recv = nullptr;
  // In elements; which buffer each describes, per kind, is the shape table's Extent.
  size_t count = 0;
  std::vector<size_t> counts;       // per rank, receive side (v-variants)
  std::vector<size_t> displs;       // per rank, receive side (gatherv, alltoallv)
  std::vector<size_t> send_counts;  // per rank, send side (scatterv, alltoallv)
  std::vector<size_t> send_displs;
  // >= 0 when the buffers are memory of that CUDA device, ordered by `cuda_stream` (only the
  // cuda_ipc algorithm sees device buffers; the others get pinned host copies).
  int cuda_device = -1;
  void* cuda_stream = nullptr;

  size_t elem() const { return DataTypeSize(type); }
};

// Element offsets of blocks laid out back to back.
inline std::vector<size_t> PackedOffsets(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) offsets[i + 1] = offsets[i] + counts[i];
  return offsets;
}

// `total` elements split into `parts` blocks whose sizes differ by at most one.
inline std::vector<size_t> EvenCounts(size_t total, int parts) {
  std::vector<size_t> counts(parts, total / parts);
  for (size_t i = 0; i < total % parts; ++i) ++counts[i];
  return counts;
}

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_COLLECTIVE_ARGS_H_
