// The collectives the fault-injection tests attack (allreduce, broadcast, allgather, barrier), each
// forced to one of the algorithms that implement it, and one rank's repeated call of one.
#ifndef CHORUS_TESTS_RELIABILITY_FAULT_CASE_H_
#define CHORUS_TESTS_RELIABILITY_FAULT_CASE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "chorus/collectives/collective_kind.h"
#include "chorus/collectives/communicator.h"

namespace chorus::testing {

struct FaultCase {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  std::string algorithm;

  std::string Name() const;  // "allreduce/ring"
};

// Allreduce, broadcast, allgather and barrier, each with every algorithm the algorithm table
// lists for it.
std::vector<FaultCase> FaultCases();

// One rank's buffers for calling `fault_case` again and again with `count` float32 elements
// (broadcasts from rank 0). The tests look at how calls fail, not at their results, which the
// collectives suites check.
class FaultCall {
 public:
  FaultCall(FaultCase fault_case, int ranks, size_t count);

  absl::Status Run(Communicator& comm, absl::Duration timeout);

 private:
  const FaultCase case_;
  const size_t count_;
  std::vector<float> send_;
  std::vector<float> recv_;
};

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_RELIABILITY_FAULT_CASE_H_
