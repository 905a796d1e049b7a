#include "tests/reliability/fault_case.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"

namespace chorus::testing {

std::string FaultCase::Name() const {
  return absl::StrCat(CollectiveKindName(kind), "/", algorithm);
}

std::vector<FaultCase> FaultCases() {
  std::vector<FaultCase> cases;
  for (CollectiveKind kind : {CollectiveKind::kAllReduce, CollectiveKind::kBroadcast,
                              CollectiveKind::kAllGather, CollectiveKind::kBarrier}) {
    for (const std::string& algorithm : Communicator::Algorithms(kind)) {
      cases.push_back({kind, algorithm});
    }
  }
  return cases;
}

FaultCall::FaultCall(FaultCase fault_case, int ranks, size_t count)
    : case_(std::move(fault_case)),
      count_(count),
      send_(count, 1.0f),
      recv_(case_.kind == CollectiveKind::kAllGather ? count * ranks : count) {}

absl::Status FaultCall::Run(Communicator& comm, absl::Duration timeout) {
  CollectiveOptions options;
  options.algorithm = case_.algorithm;
  options.timeout = timeout;
  switch (case_.kind) {
    case CollectiveKind::kAllReduce:
      return comm.AllReduce(send_.data(), recv_.data(), count_, DataType::kFloat32, ReduceOp::kSum,
                            options);
    case CollectiveKind::kBroadcast:
      return comm.Broadcast(send_.data(), recv_.data(), count_, DataType::kFloat32, 0, options);
    case CollectiveKind::kAllGather:
      return comm.AllGather(send_.data(), recv_.data(), count_, DataType::kFloat32, options);
    case CollectiveKind::kBarrier:
      return comm.Barrier(options);
    default:
      return InvalidArgumentError(absl::StrCat(case_.Name(), " is not a fault case"));
  }
}

}  // namespace chorus::testing
