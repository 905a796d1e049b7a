// The operations a communicator offers, and the algorithms that implement them. Both enums'
// numeric values travel in collective headers on the wire: append, never reorder.
#ifndef CHORUS_COLLECTIVES_COLLECTIVE_KIND_H_
#define CHORUS_COLLECTIVES_COLLECTIVE_KIND_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace chorus {

enum class CollectiveKind : uint8_t {
  kAllReduce = 0,
  kBroadcast = 1,
  kReduce = 2,
  kAllGather = 3,
  kAllGatherV = 4,
  kReduceScatter = 5,
  kReduceScatterV = 6,
  kGather = 7,
  kGatherV = 8,
  kScatter = 9,
  kScatterV = 10,
  kAllToAll = 11,
  kAllToAllV = 12,
  kBarrier = 13,
  kSend = 14,  // point-to-point; no sequence number, no algorithm choice
  kRecv = 15,
};
inline constexpr int kNumCollectiveKinds = 16;

enum class AlgorithmId : uint8_t {
  kNone = 0,
  kRing = 1,
  kRecursiveDoubling = 2,
  kRabenseifner = 3,
  kBinomial = 4,
  kDoubleBinaryTree = 5,
  kPairwise = 6,
  kLinear = 7,
  kDissemination = 8,
  kDirect = 9,  // point-to-point
  kHierarchical = 10,
  kCudaIpc = 11,  // CUDA device buffers of ranks on one host, read in place (docs/cuda.md)
  kSharedSlots = 12,  // small calls between ranks that share memory, without messages
};
inline constexpr int kNumAlgorithmIds = 13;

// Names and properties of a collective, read from its row of the shape table (shape.h):
// "allreduce", "broadcast", "reduce", "allgather", "allgatherv", "reduce_scatter",
// "reduce_scatterv", "gather", "gatherv", "scatter", "scatterv", "alltoall", "alltoallv",
// "barrier", "send", "recv".
absl::string_view CollectiveKindName(CollectiveKind kind);
absl::StatusOr<CollectiveKind> ParseCollectiveKind(absl::string_view name);

// "ring", "recursive_doubling", "rabenseifner", "binomial", "double_binary_tree", "pairwise",
// "linear", "dissemination", "direct", "hierarchical", "cuda_ipc", "shared_slots" ("none" for
// kNone).
absl::string_view AlgorithmName(AlgorithmId id);
absl::StatusOr<AlgorithmId> ParseAlgorithmName(absl::string_view name);

// True for collectives with a root rank.
bool IsRooted(CollectiveKind kind);
// True for collectives that combine values with a ReduceOp.
bool IsReduction(CollectiveKind kind);
// True for collectives whose every buffer holds the same `count` elements, element i of each
// meeting element i of the result (allreduce, broadcast, reduce): the same stretch of every
// rank's buffers is a call of its own.
bool IsElementwise(CollectiveKind kind);

bool IsValidCollectiveKind(uint8_t value);
bool IsValidAlgorithmId(uint8_t value);

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_COLLECTIVE_KIND_H_
