// Everything an algorithm needs to know about one collective call, copied out of the caller's
// arguments (so an asynchronous call does not depend on spans the caller may free).
// Buffer layouts per kind are documented in communicator.h.
#ifndef CHORUS_COLLECTIVES_COLLECTIVE_ARGS_H_
#define CHORUS_COLLECTIVES_COLLECTIVE_ARGS_H_

#include <cstddef>
#include <numeric>
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
  // Elements: of the whole buffer (allreduce, broadcast, reduce), of each rank's block
  // (allgather, reduce_scatter, gather, scatter, alltoall), or of this rank's own block
  // (gatherv send, scatterv receive).
  size_t count = 0;
  std::vector<size_t> counts;       // per rank, receive side (v-variants)
  std::vector<size_t> displs;       // per rank, receive side, in elements (gatherv, alltoallv)
  std::vector<size_t> send_counts;  // per rank, send side (scatterv, alltoallv)
  std::vector<size_t> send_displs;

  size_t elem() const { return DataTypeSize(type); }

  // The size the selector and the logs speak of: the whole array, as nccl-tests reports it
  // (for allgather and reduce_scatter the gathered / scattered array of all ranks).
  size_t bytes(int ranks) const {
    switch (kind) {
      case CollectiveKind::kAllReduce:
      case CollectiveKind::kBroadcast:
      case CollectiveKind::kReduce:
        return count * elem();
      case CollectiveKind::kAllGather:
      case CollectiveKind::kReduceScatter:
      case CollectiveKind::kGather:
      case CollectiveKind::kScatter:
      case CollectiveKind::kAllToAll:
        return count * elem() * static_cast<size_t>(ranks);
      case CollectiveKind::kAllGatherV:
      case CollectiveKind::kReduceScatterV:
      case CollectiveKind::kGatherV:
      case CollectiveKind::kAllToAllV:
        return std::accumulate(counts.begin(), counts.end(), size_t{0}) * elem();
      case CollectiveKind::kScatterV:
        return std::accumulate(send_counts.begin(), send_counts.end(), size_t{0}) * elem();
      default:
        return count * elem();
    }
  }
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
