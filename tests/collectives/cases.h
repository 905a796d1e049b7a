// The collectives correctness matrix: cases (collective x algorithm x type x op x count x
// in-place x root), inputs whose reductions are exact in every type (small integers: sums stay
// below 128 for 9 ranks, products are powers of two at most 8), exact expected values, and a
// runner that poisons every output first and checks every byte on every rank, including the
// gaps a v-collective must not write.
#ifndef CHORUS_TESTS_COLLECTIVES_CASES_H_
#define CHORUS_TESTS_COLLECTIVES_CASES_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "chorus/collectives/collective_kind.h"
#include "chorus/collectives/communicator.h"
#include "chorus/core/types.h"
#include "chorus/cuda/gpu_runtime.h"

namespace chorus::testing {

struct Case {
  CollectiveKind kind = CollectiveKind::kBarrier;
  std::string algorithm;  // empty: the selector's choice
  DataType type = DataType::kInt32;
  ReduceOp op = ReduceOp::kSum;
  size_t count = 0;
  bool in_place = false;
  int root = 0;

  std::string Describe() const;
};

// What a matrix covers; empty vectors mean "all" (for types and ops, see BuildCases).
struct Matrix {
  std::vector<CollectiveKind> kinds;
  std::vector<DataType> types;
  std::vector<ReduceOp> ops;
  std::vector<size_t> counts = {0, 1, 7, 1000};
  bool every_algorithm = true;          // else only the selector's choice
  std::vector<std::string> algorithms;  // when not empty: only these (overrides the above)
  bool both_placements = true;          // in-place and out-of-place
  // Counts are of the whole array: collectives whose count is per rank block get count/ranks
  // (so "4 MiB" means the same traffic for every collective).
  bool counts_are_totals = false;
};

// Element `index` of a buffer of `type`, written from / read as a double (float16 and bfloat16
// round to nearest). Values must be representable in the type.
void SetElement(DataType type, void* base, size_t index, double value);
double ElementValue(DataType type, const void* base, size_t index);

// Every case of `matrix` for a communicator of `ranks`, in a fixed order (all ranks must
// build the same list). Roots vary with the case so that every rank is a root somewhere.
// Empty `types` or `ops` mean all of them, except under ThreadSanitizer, where four types (one
// of each width) and two ops stand for the rest.
std::vector<Case> BuildCases(const Matrix& matrix, int ranks);

// Where RunCase puts the buffers it passes: host memory (no runtime), or copies in the memory
// of `device` of a GPU runtime (the CUDA runtime, or the tests' host stand-in), passed with
// CollectiveOptions::memory = kCuda on `stream`. Inputs are written and outputs checked on the
// host either way.
struct CaseMemory {
  GpuRuntime* runtime = nullptr;
  int device = 0;
  void* stream = nullptr;
};

// Runs one case on this rank and checks its output; the error names the case and the first
// wrong element (index, expected, got).
absl::Status RunCase(Communicator& comm, const Case& c, const CaseMemory& memory = {});

// Runs all cases in order; stops at the first failure.
absl::Status RunCases(Communicator& comm, const std::vector<Case>& cases,
                      const CaseMemory& memory = {});

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_COLLECTIVES_CASES_H_
