#include "chorus/collectives/shape.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chorus/core/status.h"

namespace chorus {
namespace {

using K = CollectiveKind;
using E = Extent;
using I = InPlace;
using B = BusFactor;

// In CollectiveKind order (checked below).
constexpr std::array<CollectiveShape, kNumCollectiveKinds> kShapes = {{
    // kind, name, collective, rooted, reduction, send, recv, send_root_only, recv_root_only,
    // in place, bus factor
    {K::kAllReduce, "allreduce", true, false, true, E::kCount, E::kCount, false, false,
     I::kSameBuffer, B::kTwiceShare},
    {K::kBroadcast, "broadcast", true, true, false, E::kCount, E::kCount, true, false,
     I::kSameBuffer, B::kOne},
    {K::kReduce, "reduce", true, true, true, E::kCount, E::kCount, false, true, I::kSameBuffer,
     B::kOne},
    {K::kAllGather, "allgather", true, false, false, E::kCount, E::kCountPerRank, false, false,
     I::kOwnBlock, B::kShare},
    {K::kAllGatherV, "allgatherv", true, false, false, E::kOwnOfCounts, E::kPackedCounts, false,
     false, I::kOwnBlock, B::kShare},
    {K::kReduceScatter, "reduce_scatter", true, false, true, E::kCountPerRank, E::kCount, false,
     false, I::kOwnBlock, B::kShare},
    {K::kReduceScatterV, "reduce_scatterv", true, false, true, E::kPackedCounts, E::kOwnOfCounts,
     false, false, I::kOwnBlock, B::kShare},
    {K::kGather, "gather", true, true, false, E::kCount, E::kCountPerRank, false, true,
     I::kOwnBlock, B::kShare},
    {K::kGatherV, "gatherv", true, true, false, E::kOwnCount, E::kPlacedCounts, false, true,
     I::kOwnBlock, B::kShare},
    {K::kScatter, "scatter", true, true, false, E::kCountPerRank, E::kCount, true, false,
     I::kOwnBlock, B::kShare},
    {K::kScatterV, "scatterv", true, true, false, E::kPlacedSendCounts, E::kOwnCount, true, false,
     I::kOwnBlock, B::kShare},
    {K::kAllToAll, "alltoall", true, false, false, E::kCountPerRank, E::kCountPerRank, false, false,
     I::kSameBuffer, B::kShare},
    {K::kAllToAllV, "alltoallv", true, false, false, E::kPlacedSendCounts, E::kPlacedCounts, false,
     false, I::kSameBuffer, B::kShare},
    {K::kBarrier, "barrier", true, false, false, E::kNone, E::kNone, false, false, I::kNever,
     B::kNone},
    {K::kSend, "send", false, false, false, E::kCount, E::kNone, false, false, I::kNever, B::kOne},
    {K::kRecv, "recv", false, false, false, E::kNone, E::kCount, false, false, I::kNever, B::kOne},
}};

constexpr bool RowsInKindOrder() {
  for (size_t i = 0; i < kShapes.size(); ++i) {
    if (static_cast<size_t>(kShapes[i].kind) != i) return false;
  }
  return true;
}
static_assert(RowsInKindOrder(), "kShapes must list the collectives in CollectiveKind order");

// A buffer that holds every rank's block.
bool HoldsAllRanks(Extent extent) {
  return extent == E::kCountPerRank || extent == E::kPackedCounts || extent == E::kPlacedCounts ||
         extent == E::kPlacedSendCounts;
}

// The buffer the collective's array is measured by: the one holding every rank's block (the
// receive side when both do), else the one of `count` elements.
Extent ArraySide(const CollectiveShape& shape) {
  if (HoldsAllRanks(shape.recv)) return shape.recv;
  if (HoldsAllRanks(shape.send)) return shape.send;
  return E::kCount;
}

bool Has(bool root_only, const CollectiveArgs& args, int rank) {
  return !root_only || rank == args.root;
}

size_t Sum(const std::vector<size_t>& values) {
  return std::accumulate(values.begin(), values.end(), size_t{0});
}

// One past the last element any block reaches.
size_t End(const std::vector<size_t>& displs, const std::vector<size_t>& counts) {
  size_t end = 0;
  for (size_t i = 0; i < counts.size(); ++i) end = std::max(end, displs[i] + counts[i]);
  return end;
}

size_t ElementsIn(Extent extent, const CollectiveArgs& args, int rank, int ranks) {
  switch (extent) {
    case E::kNone:
      return 0;
    case E::kCount:
    case E::kOwnCount:
      return args.count;
    case E::kOwnOfCounts:
      return args.counts[rank];
    case E::kCountPerRank:
      return args.count * static_cast<size_t>(ranks);
    case E::kPackedCounts:
      return Sum(args.counts);
    case E::kPlacedCounts:
      return End(args.displs, args.counts);
    case E::kPlacedSendCounts:
      return End(args.send_displs, args.send_counts);
  }
  return 0;
}

// Elements of the array in a buffer laid out as `extent` (the blocks, not the gaps between).
size_t ArrayElements(Extent extent, const CollectiveArgs& args, int ranks) {
  switch (extent) {
    case E::kCountPerRank:
      return args.count * static_cast<size_t>(ranks);
    case E::kPackedCounts:
    case E::kPlacedCounts:
      return Sum(args.counts);
    case E::kPlacedSendCounts:
      return Sum(args.send_counts);
    default:
      return args.count;
  }
}

// Where `rank`'s block lies in a buffer laid out as `extent`, in elements.
struct Block {
  size_t offset = 0;
  size_t count = 0;
};
Block BlockIn(Extent extent, const CollectiveArgs& args, int rank) {
  switch (extent) {
    case E::kNone:
      return {};
    case E::kCount:
    case E::kOwnCount:
      return {0, args.count};
    case E::kOwnOfCounts:
      return {0, args.counts[rank]};
    case E::kCountPerRank:
      return {static_cast<size_t>(rank) * args.count, args.count};
    case E::kPackedCounts:
      return {std::accumulate(args.counts.begin(), args.counts.begin() + rank, size_t{0}),
              args.counts[rank]};
    case E::kPlacedCounts:
      return {args.displs[rank], args.counts[rank]};
    case E::kPlacedSendCounts:
      return {args.send_displs[rank], args.send_counts[rank]};
  }
  return {};
}

// Every rank's block in a buffer laid out as `extent` (empty for a buffer of one block).
RankLayout BlocksIn(Extent extent, const CollectiveArgs& args, int ranks) {
  switch (extent) {
    case E::kCountPerRank: {
      RankLayout layout;
      for (int r = 0; r < ranks; ++r) layout.displs.push_back(static_cast<size_t>(r) * args.count);
      layout.counts.assign(ranks, args.count);
      return layout;
    }
    case E::kPackedCounts: {
      std::vector<size_t> displs = PackedOffsets(args.counts);
      displs.pop_back();
      return {std::move(displs), args.counts};
    }
    case E::kPlacedCounts:
      return {args.displs, args.counts};
    case E::kPlacedSendCounts:
      return {args.send_displs, args.send_counts};
    default:
      return {};
  }
}

// The per-rank vectors a buffer laid out as `extent` reads, checked for one entry per rank.
// They are named as the caller passed them: alltoallv, whose sides each have their own, says
// which side.
absl::Status CheckVectors(const CollectiveShape& shape, Extent extent, bool both_sides_placed,
                          const CollectiveArgs& args, int ranks) {
  auto need_ranks = [&](const std::vector<size_t>& values, absl::string_view side,
                        absl::string_view what) {
    if (values.size() == static_cast<size_t>(ranks)) return absl::OkStatus();
    return InvalidArgumentError(absl::StrCat(shape.name, ": ", both_sides_placed ? side : "", what,
                                             " has ", values.size(), " entries, not ", ranks));
  };
  switch (extent) {
    case E::kOwnOfCounts:
    case E::kPackedCounts:
      return need_ranks(args.counts, "", "counts");
    case E::kPlacedCounts:
      CHORUS_RETURN_IF_ERROR(need_ranks(args.counts, "recv_", "counts"));
      return need_ranks(args.displs, "recv_", "displs");
    case E::kPlacedSendCounts:
      CHORUS_RETURN_IF_ERROR(need_ranks(args.send_counts, "send_", "counts"));
      return need_ranks(args.send_displs, "send_", "displs");
    default:
      return absl::OkStatus();
  }
}

bool Placed(Extent extent) { return extent == E::kPlacedCounts || extent == E::kPlacedSendCounts; }

}  // namespace

const CollectiveShape& ShapeOf(CollectiveKind kind) { return kShapes[static_cast<size_t>(kind)]; }

absl::string_view CollectiveKindName(CollectiveKind kind) { return ShapeOf(kind).name; }

absl::StatusOr<CollectiveKind> ParseCollectiveKind(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(name));
  for (const CollectiveShape& shape : kShapes) {
    if (shape.name == lower) return shape.kind;
  }
  return InvalidArgumentError(
      absl::StrCat("unknown collective '", name, "'; known: ",
                   absl::StrJoin(kShapes, ", ", [](std::string* out, const CollectiveShape& shape) {
                     absl::StrAppend(out, shape.name);
                   })));
}

bool IsRooted(CollectiveKind kind) { return ShapeOf(kind).rooted; }
bool IsReduction(CollectiveKind kind) { return ShapeOf(kind).reduction; }
bool IsElementwise(CollectiveKind kind) {
  const CollectiveShape& shape = ShapeOf(kind);
  return shape.send == E::kCount && shape.recv == E::kCount;
}

BufferElements ElementsOf(const CollectiveArgs& args, int rank, int ranks) {
  const CollectiveShape& shape = ShapeOf(args.kind);
  BufferElements elements;
  if (Has(shape.send_root_only, args, rank)) {
    elements.send = ElementsIn(shape.send, args, rank, ranks);
  }
  if (Has(shape.recv_root_only, args, rank)) {
    elements.recv = ElementsIn(shape.recv, args, rank, ranks);
  }
  return elements;
}

absl::Status CheckShape(const CollectiveArgs& args, int rank, int ranks) {
  const CollectiveShape& shape = ShapeOf(args.kind);
  const bool has_send = Has(shape.send_root_only, args, rank);
  const bool has_recv = Has(shape.recv_root_only, args, rank);
  const bool both_placed = Placed(shape.send) && Placed(shape.recv);
  if (has_send) CHORUS_RETURN_IF_ERROR(CheckVectors(shape, shape.send, both_placed, args, ranks));
  if (has_recv) CHORUS_RETURN_IF_ERROR(CheckVectors(shape, shape.recv, both_placed, args, ranks));
  // A rank's own `count` and its entry in the root's vectors describe the same block.
  const bool own_sends = shape.send == E::kOwnCount && Placed(shape.recv) && has_recv;
  const bool own_receives = shape.recv == E::kOwnCount && Placed(shape.send) && has_send;
  if (own_sends || own_receives) {
    const size_t listed = BlockIn(own_sends ? shape.recv : shape.send, args, rank).count;
    if (listed != args.count) {
      return InvalidArgumentError(absl::StrCat(shape.name, ": the root ",
                                               own_sends ? "sends " : "receives ", args.count,
                                               " elements but counts[root] is ", listed));
    }
  }
  if (shape.in_place == I::kSameBuffer && both_placed && args.send == args.recv &&
      (args.send_counts != args.counts || args.send_displs != args.displs)) {
    return InvalidArgumentError(absl::StrCat(
        shape.name, " in place needs the same counts and displacements for send and receive"));
  }
  return absl::OkStatus();
}

std::optional<InPlaceOffsets> InPlaceOffsetsOf(const CollectiveArgs& args, int rank) {
  const CollectiveShape& shape = ShapeOf(args.kind);
  switch (shape.in_place) {
    case I::kNever:
      return std::nullopt;
    case I::kSameBuffer:
      return InPlaceOffsets{};
    case I::kOwnBlock:
      break;
  }
  const bool recv_holds_all = HoldsAllRanks(shape.recv);
  if (!Has(recv_holds_all ? shape.recv_root_only : shape.send_root_only, args, rank)) {
    return std::nullopt;
  }
  const size_t offset = BlockIn(recv_holds_all ? shape.recv : shape.send, args, rank).offset;
  return recv_holds_all ? InPlaceOffsets{offset, 0} : InPlaceOffsets{0, offset};
}

bool IsInPlace(const CollectiveArgs& args, int rank) {
  const std::optional<InPlaceOffsets> offsets = InPlaceOffsetsOf(args, rank);
  if (!offsets.has_value()) return false;
  // Both buffers start at their offsets from one base: send - send_offset == recv - recv_offset.
  const size_t elem = args.elem();
  return reinterpret_cast<uintptr_t>(args.send) + offsets->recv * elem ==
         reinterpret_cast<uintptr_t>(args.recv) + offsets->send * elem;
}

Agreement AgreedCounts(CollectiveKind kind) {
  const CollectiveShape& shape = ShapeOf(kind);
  auto either_side = [&shape](auto is) { return is(shape.send) || is(shape.recv); };
  if (either_side([](Extent e) { return e == E::kOwnOfCounts || e == E::kPackedCounts; })) {
    return Agreement::kCounts;
  }
  if (either_side([](Extent e) { return e == E::kOwnCount || Placed(e); })) {
    return Agreement::kNone;
  }
  return Agreement::kCount;
}

size_t PayloadBytes(const CollectiveArgs& args, int ranks) {
  return ArrayElements(ArraySide(ShapeOf(args.kind)), args, ranks) * args.elem();
}

CollectiveArgs ArgsForArray(CollectiveKind kind, size_t elements, int ranks) {
  CollectiveArgs args;
  args.kind = kind;
  args.type = DataType::kUint8;
  switch (ArraySide(ShapeOf(kind))) {
    case E::kCountPerRank:
      args.count = elements / static_cast<size_t>(ranks);
      break;
    case E::kPackedCounts:
    case E::kPlacedCounts:
      args.counts = EvenCounts(elements, ranks);
      break;
    case E::kPlacedSendCounts:
      args.send_counts = EvenCounts(elements, ranks);
      break;
    default:
      args.count = elements;
      break;
  }
  return args;
}

int64_t ArrayGranularity(CollectiveKind kind, int ranks) {
  return ArraySide(ShapeOf(kind)) == E::kCountPerRank ? ranks : 1;
}

size_t RankLayout::extent() const { return End(displs, counts); }

RankLayout SendBlocks(const CollectiveArgs& args, int ranks) {
  return BlocksIn(ShapeOf(args.kind).send, args, ranks);
}

RankLayout RecvBlocks(const CollectiveArgs& args, int ranks) {
  return BlocksIn(ShapeOf(args.kind).recv, args, ranks);
}

std::vector<size_t> RankBlocks(const CollectiveArgs& args, int ranks) {
  const Extent side = ArraySide(ShapeOf(args.kind));
  return HoldsAllRanks(side) ? BlocksIn(side, args, ranks).counts : EvenCounts(args.count, ranks);
}

void CopyOwnBlock(const CollectiveArgs& args) {
  const CollectiveShape& shape = ShapeOf(args.kind);
  const size_t elem = args.elem();
  const Block from = BlockIn(shape.send, args, 0);
  const Block to = BlockIn(shape.recv, args, 0);
  const auto* in = static_cast<const uint8_t*>(args.send) + from.offset * elem;
  auto* out = static_cast<uint8_t*>(args.recv) + to.offset * elem;
  if (in != out && to.count > 0) std::memcpy(out, in, to.count * elem);
}

double BusBandwidthFactor(CollectiveKind kind, int ranks) {
  const double n = ranks;
  switch (ShapeOf(kind).bus) {
    case B::kNone:
      return 0;
    case B::kOne:
      return 1;
    case B::kShare:
      return (n - 1) / n;
    case B::kTwiceShare:
      return 2 * (n - 1) / n;
  }
  return 0;
}

}  // namespace chorus
