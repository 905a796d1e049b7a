// The small header every rank sends to each peer it exchanges data with in a collective (and
// to its successor on the header ring, so that any disagreement is seen by at least one rank),
// on the collective's header step. Receivers compare it with their own view and fail with a
// MismatchError naming both views instead of reading mismatched data.
//
// Wire format (40 bytes, little-endian):
//   u8 version, u8 kind, u8 type, u8 op, u8 algorithm, u8[3] zero,
//   i32 root, u32 sequence, u32 ranks, u32 zero, u64 count, u64 shape digest
// `count` is the element count every rank agrees on (the whole array for allreduce, the block
// for allgather, the total for allgatherv); `shape` is a digest of per-rank counts where all
// ranks know them (allgatherv, reduce_scatterv). For gatherv, scatterv and alltoallv, whose
// ranks each know only their own counts, both are zero and the length of every message is
// checked instead. The hierarchical algorithm folds a digest of the host layout into `shape`, and
// a call on device buffers staged in segments folds the segment size.
// The collective context may append a step and a small first message to it (context.h); the
// header itself is always these 40 bytes.
#ifndef CHORUS_COLLECTIVES_ENGINE_HEADER_H_
#define CHORUS_COLLECTIVES_ENGINE_HEADER_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "chorus/collectives/collective_args.h"
#include "chorus/collectives/collective_kind.h"

namespace chorus {

// A value type.
struct CollectiveHeader {
  CollectiveKind kind = CollectiveKind::kBarrier;
  DataType type = DataType::kUint8;
  ReduceOp op = ReduceOp::kSum;
  AlgorithmId algorithm = AlgorithmId::kNone;
  int32_t root = -1;
  uint32_t sequence = 0;
  uint32_t ranks = 0;
  uint64_t count = 0;
  uint64_t shape = 0;

  static constexpr size_t kWireSize = 40;
  using Wire = std::array<uint8_t, kWireSize>;

  // `layout`: a digest of the host layout where the algorithm depends on it (hierarchical),
  // else 0; it is folded into `shape`, so ranks that disagree about the hosts fail with a
  // MismatchError instead of exchanging data in different patterns.
  static CollectiveHeader For(const CollectiveArgs& args, AlgorithmId algorithm, uint32_t sequence,
                              int ranks, uint64_t layout = 0);

  Wire Encode() const;
  // InvalidArgument when the bytes are not a header (wrong length, version or enum values).
  static absl::StatusOr<CollectiveHeader> Decode(const uint8_t* data, size_t size);

  // "allreduce #17 (ring, 1048576 x float32 (4 MiB), sum)",
  // "broadcast #3 (binomial, 8 x int32 (32 B), root 2)".
  std::string Describe() const;

  // The fields where `other` differs from this header, e.g. "count 1000 vs 999"; empty when
  // they agree.
  std::string Differences(const CollectiveHeader& other) const;
};

// Whether a header in wire form (`bytes` long) is `mine`, byte for byte: equal wires agree, and
// only a disagreement is worth decoding and describing.
bool SameWire(const CollectiveHeader::Wire& mine, const uint8_t* wire, size_t bytes);

// "512 B", "4 MiB", "1.5 GiB": byte counts in messages and dumps.
std::string HumanBytes(uint64_t bytes);

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_ENGINE_HEADER_H_
