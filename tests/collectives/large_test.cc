// Messages of a few MiB, where the ring and tree pipelines run many segments: every
// collective and algorithm at a few rank counts and types. The segment size is cut to 64 KiB
// so even these sizes run tens of segments with the window full.
#include <catch2/catch.hpp>

#include "tests/collectives/cases.h"
#include "tests/collectives/test_transport.h"

namespace chorus::testing {
namespace {

void RunLarge(TransportKind transport, int ranks, std::vector<DataType> types,
              std::vector<ReduceOp> ops) {
  Matrix matrix;
  matrix.types = std::move(types);
  matrix.ops = std::move(ops);
  matrix.counts = {(size_t{3} << 20) / 2 + 5};  // 1.5 Mi elements (+5: uneven blocks)
  matrix.counts_are_totals = true;
  const std::vector<Case> cases = BuildCases(matrix, ranks);
  CommunicatorOptions options;
  options.segment_bytes = 64 * 1024;
  const absl::Status status = RunOnThreads(
      transport, ranks, [&](Communicator& comm) { return RunCases(comm, cases); }, absl::Minutes(8),
      options);
  INFO(cases.size() << " cases on " << ranks << " ranks over " << TransportName(transport));
  if (!status.ok()) FAIL(status.ToString());
}

TEST_CASE("large messages, 4 ranks", "[large]") {
  RunLarge(kTestTransport, 4, {DataType::kFloat32, DataType::kBFloat16},
           {ReduceOp::kSum, ReduceOp::kMax});
}

TEST_CASE("large messages, 3 ranks", "[large]") {
  RunLarge(kTestTransport, 3, {DataType::kInt64, DataType::kFloat16},
           {ReduceOp::kProd, ReduceOp::kAvg});
}

}  // namespace
}  // namespace chorus::testing
