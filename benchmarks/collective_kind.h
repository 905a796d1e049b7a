// The collectives the benchmarks measure, with the nccl-tests conventions attached to each:
// the bus-bandwidth factor and how the full array of S bytes splits into per-rank buffers.
#ifndef CHORUS_BENCHMARKS_COLLECTIVE_KIND_H_
#define CHORUS_BENCHMARKS_COLLECTIVE_KIND_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace chorus::bench {

enum class Collective {
  kAllreduce,
  kBroadcast,
  kReduce,
  kAllgather,
  kReduceScatter,
  kAlltoall,
  kBarrier,
};

// "allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall", "barrier".
absl::string_view CollectiveName(Collective collective);
absl::StatusOr<Collective> ParseCollective(absl::string_view name);

// busbw = algbw x factor (nccl-tests): allreduce 2(n-1)/n; reduce-scatter, allgather and
// alltoall (n-1)/n; broadcast and reduce 1; barrier 0 (it moves no payload).
double BusBandwidthFactor(Collective collective, int ranks);

// Whether the collective reduces (and so has a meaningful op) and whether it has a root.
bool HasReduceOp(Collective collective);
bool HasRoot(Collective collective);

// Elements in one rank's input and output buffers when the full array has `count` elements
// (count is a multiple of `ranks` for allgather, reduce-scatter and alltoall):
//   allreduce, broadcast, reduce, alltoall: count in, count out
//   allgather: count/ranks in, count out;  reduce-scatter: count in, count/ranks out
struct BufferElements {
  int64_t input = 0;
  int64_t output = 0;
};
BufferElements BufferElementsFor(Collective collective, int64_t count, int ranks);

// The granularity of `count`: ranks for the collectives that split the array, else 1.
int64_t CountGranularity(Collective collective, int ranks);

}  // namespace chorus::bench

#endif  // CHORUS_BENCHMARKS_COLLECTIVE_KIND_H_
