// The shape of every collective, as data: one row per CollectiveKind saying how its send and
// receive buffers follow from its arguments (count, per-rank counts and displacements, the rank
// count), which of them only the root passes, what its in-place form is, whether it has a root
// and reduces, and how nccl-tests counts its bytes and bus bandwidth. Validation, the wire
// header, the selector, the algorithms' block layouts and the benchmarks ask this table rather
// than each deciding per kind (communicator.h describes the same layouts for users).
#ifndef CHORUS_COLLECTIVES_SHAPE_H_
#define CHORUS_COLLECTIVES_SHAPE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "chorus/collectives/collective_args.h"
#include "chorus/collectives/collective_kind.h"

namespace chorus {

// How one buffer is laid out, in elements of the call's type.
enum class Extent : uint8_t {
  kNone,              // no buffer
  kCount,             // `count`, the same on every rank: the whole array, or each rank's block
  kOwnCount,          // `count`: this rank's own block, which may differ between ranks
  kOwnOfCounts,       // counts[rank]: this rank's own block of a v-collective
  kCountPerRank,      // size x `count`: block r, of `count`, at r * count
  kPackedCounts,      // block r of counts[r], the blocks back to back in rank order
  kPlacedCounts,      // block r of counts[r] at displs[r]
  kPlacedSendCounts,  // block r of send_counts[r] at send_displs[r]
};

enum class InPlace : uint8_t {
  kNever,       // no buffers
  kSameBuffer,  // send == recv
  kOwnBlock,    // the one-block buffer is this rank's block of the all-ranks one
};

// busbw = algbw x factor (nccl-tests), n ranks.
enum class BusFactor : uint8_t {
  kNone,        // 0: moves no payload
  kOne,         // 1
  kShare,       // (n-1)/n
  kTwiceShare,  // 2(n-1)/n
};

struct CollectiveShape {
  CollectiveKind kind;
  absl::string_view name;
  bool collective;  // false for point-to-point
  bool rooted;
  bool reduction;
  Extent send;
  Extent recv;
  bool send_root_only;  // only the root passes a send buffer (others: none)
  bool recv_root_only;  // only the root passes a receive buffer
  InPlace in_place;
  BusFactor bus;
};

// The row of `kind`.
const CollectiveShape& ShapeOf(CollectiveKind kind);

// Elements of this rank's buffers; a buffer only the root passes has 0 elsewhere. The
// arguments must have passed CheckShape.
struct BufferElements {
  size_t send = 0;
  size_t recv = 0;
};
BufferElements ElementsOf(const CollectiveArgs& args, int rank, int ranks);

// InvalidArgument, naming the parameter, when the per-rank counts and displacements this rank
// passes do not fit the collective: not one entry per rank, the root's own count not the one it
// sends or receives, or an in-place alltoallv whose two sides differ.
absl::Status CheckShape(const CollectiveArgs& args, int rank, int ranks);

// The in-place form as offsets into one allocation, in elements: the send buffer starts `send`
// elements in and the receive buffer `recv` elements in (in-place allgather: send at this
// rank's block of the receive buffer, receive at 0). None when the collective has no in-place
// form on this rank (barrier; gather and scatter off the root).
struct InPlaceOffsets {
  size_t send = 0;
  size_t recv = 0;
};
std::optional<InPlaceOffsets> InPlaceOffsetsOf(const CollectiveArgs& args, int rank);
// Whether args.send and args.recv are the collective's in-place form.
bool IsInPlace(const CollectiveArgs& args, int rank);

// What every rank of a collective passes alike, so that the wire header can carry it:
// `count` (allreduce, allgather, ...), the per-rank `counts` (allgatherv, reduce_scatterv), or
// neither, where each rank passes only its own blocks (gatherv, scatterv, alltoallv).
enum class Agreement : uint8_t { kNone, kCount, kCounts };
Agreement AgreedCounts(CollectiveKind kind);

// The size the selector, the logs and the benchmarks speak of, in bytes: the whole array of
// all ranks, as nccl-tests reports it (for allgather and reduce_scatter the gathered /
// scattered array, for the v-collectives the sum of the counts).
size_t PayloadBytes(const CollectiveArgs& args, int ranks);

// A uint8 call (untyped: set `type` to taste) whose PayloadBytes is `elements` elements:
// `count`, `counts` or `send_counts` set as the collective splits its array among `ranks`
// (evenly for the v-collectives). For collectives with a block per rank `elements` should be
// a multiple of ranks (ArrayGranularity).
CollectiveArgs ArgsForArray(CollectiveKind kind, size_t elements, int ranks);
// 1, or `ranks` for collectives whose whole array is a block per rank of `count` each.
int64_t ArrayGranularity(CollectiveKind kind, int ranks);

// Where each rank's block lies in a buffer that holds every rank's block (allgather's receive
// buffer, gatherv's at the root, both of alltoall's): element displacements and counts, by
// rank. Empty for a buffer of one block.
struct RankLayout {
  std::vector<size_t> displs;
  std::vector<size_t> counts;
  size_t extent() const;  // one past the furthest block
};
RankLayout SendBlocks(const CollectiveArgs& args, int ranks);
RankLayout RecvBlocks(const CollectiveArgs& args, int ranks);

// Element counts of the ranks' blocks of the collective's array: a collective on one whole
// array (allreduce) splits it evenly, the others have their own blocks.
std::vector<size_t> RankBlocks(const CollectiveArgs& args, int ranks);

// The collective on a single rank: its own block moves from the send to the receive buffer.
void CopyOwnBlock(const CollectiveArgs& args);

// busbw / algbw for `ranks` ranks.
double BusBandwidthFactor(CollectiveKind kind, int ranks);

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_SHAPE_H_
