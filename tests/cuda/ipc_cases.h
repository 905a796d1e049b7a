// The cases that name the cuda_ipc algorithm: every collective but the barrier, each in both
// placements except the alltoalls, which cuda_ipc runs out of place only (in place it refuses
// them and the communicator stages them). Shared by the host stand-in and the GPU tests.
#ifndef CHORUS_TESTS_CUDA_IPC_CASES_H_
#define CHORUS_TESTS_CUDA_IPC_CASES_H_

#include <vector>

#include "chorus/collectives/collective_kind.h"
#include "tests/collectives/cases.h"

namespace chorus::testing {

// Collectives cuda_ipc runs in both placements.
inline std::vector<CollectiveKind> CudaIpcKinds() {
  return {
      CollectiveKind::kAllReduce,      CollectiveKind::kReduce,    CollectiveKind::kReduceScatter,
      CollectiveKind::kReduceScatterV, CollectiveKind::kBroadcast, CollectiveKind::kAllGather,
      CollectiveKind::kAllGatherV,     CollectiveKind::kGather,    CollectiveKind::kGatherV,
      CollectiveKind::kScatter,        CollectiveKind::kScatterV};
}

// `base`'s types and counts, for every collective above and the alltoalls out of place, with
// the algorithm named (`algorithm` "cuda_ipc"), or left to the communicator ("").
inline std::vector<Case> CudaIpcCases(const Matrix& base, int ranks, const char* algorithm) {
  Matrix most = base;
  most.kinds = CudaIpcKinds();
  most.every_algorithm = false;
  most.algorithms.clear();
  if (algorithm[0] != '\0') most.algorithms = {algorithm};
  Matrix exchanges = most;
  exchanges.kinds = {CollectiveKind::kAllToAll, CollectiveKind::kAllToAllV};
  exchanges.both_placements = false;
  std::vector<Case> cases = BuildCases(most, ranks);
  for (const Case& c : BuildCases(exchanges, ranks)) cases.push_back(c);
  return cases;
}

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_CUDA_IPC_CASES_H_
