// Exact verification for the benchmarks: each rank's input is a deterministic function of
// (rank, element index), chosen so that every reduction is exact in every data type (small
// integers; products of 1s and 2s; averages whose sum is a multiple of the rank count), and the
// expected output of every rank follows from the same function. A misplaced chunk, a dropped or
// doubled contribution, or an untouched output shows up as wrong elements.
//
// Exactness holds for any rank count up to 42 for every type (sums stay below 127 for int8);
// above that sums use 0/1 inputs, exact up to 127 ranks for int8 and 256 for bfloat16.
#ifndef CHORUS_BENCHMARKS_VERIFY_H_
#define CHORUS_BENCHMARKS_VERIFY_H_

#include <cstdint>

#include "chorus/collectives/collective_kind.h"
#include "chorus/collectives/shape.h"
#include "chorus/core/types.h"

namespace chorus::bench {

struct VerifySpec {
  CollectiveKind collective = CollectiveKind::kAllReduce;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int ranks = 1;
  int root = 0;
  int64_t count = 0;  // elements of the full array (see BufferElementsFor)
};

// Elements of the root's input (send) and output (recv) buffers, the largest any rank passes,
// when the collective's whole array has `count` elements (a multiple of ArrayGranularity), as
// the library's shape table lays them out.
BufferElements BufferElementsFor(CollectiveKind collective, int64_t count, int ranks);

// Writes `rank`'s input: BufferElementsFor(...).send elements of spec.type at `input`.
void FillInput(const VerifySpec& spec, int rank, void* input);

// Fills an output buffer with a value no correct result contains (NaN for floating types, -1 or
// the maximum for integers), so an element the collective never wrote counts as wrong.
void FillSentinel(const VerifySpec& spec, void* output, int64_t elements);

// The number of elements of `rank`'s output (BufferElementsFor(...).recv elements) that
// differ from the expected result. Ranks whose output is undefined (non-roots of reduce) and
// barrier count 0.
int64_t CountWrong(const VerifySpec& spec, int rank, const void* output);

}  // namespace chorus::bench

#endif  // CHORUS_BENCHMARKS_VERIFY_H_
