// Helpers shared by the algorithms: segment arithmetic (modular rank arithmetic comes from
// engine/rank_arithmetic.h), beside the per-rank block layouts of the shape table (RankBlocks,
// shape.h).
#ifndef CHORUS_COLLECTIVES_ALGORITHMS_BLOCKS_H_
#define CHORUS_COLLECTIVES_ALGORITHMS_BLOCKS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "chorus/collectives/engine/rank_arithmetic.h"
#include "chorus/collectives/shape.h"

namespace chorus {

// The `index`-th of `parts` near-equal pieces of [0, count): its start and length.
struct Piece {
  size_t start;
  size_t count;
};
inline Piece PieceOf(size_t count, size_t parts, size_t index) {
  const size_t base = count / parts;
  const size_t extra = count % parts;
  return {index * base + (index < extra ? index : extra), base + (index < extra ? 1 : 0)};
}

// How many segments a pipeline cuts `bytes` into.
inline size_t SegmentsFor(size_t bytes, size_t segment_bytes) {
  if (segment_bytes == 0) return 1;
  const size_t segments = (bytes + segment_bytes - 1) / segment_bytes;
  return segments == 0 ? 1 : segments;
}

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_ALGORITHMS_BLOCKS_H_
