// Messages of a few MiB, where the ring and tree pipelines run many segments: every
// collective and algorithm, every type and every op (each op at one of two rank counts), as
// threads, and again as processes for the transports that cross process boundaries. The
// segment size is cut to 64 KiB so even these sizes run tens of segments with the window full,
// and the streaming threshold to 1 MiB so the ring's final blocks are streamed.
#include <catch2/catch.hpp>

#include "tests/collectives/cases.h"
#include "tests/collectives/test_transport.h"

namespace chorus::testing {
namespace {

enum class RankForm { kThreads, kProcesses };

void RunLarge(RankForm form, int ranks, std::vector<DataType> types, std::vector<ReduceOp> ops) {
  Matrix matrix;
  matrix.types = std::move(types);
  matrix.ops = std::move(ops);
  matrix.counts = {(size_t{3} << 20) / 2 + 5};  // 1.5 Mi elements (+5: uneven blocks)
  matrix.counts_are_totals = true;
  const std::vector<Case> cases = BuildCases(matrix, ranks);
  CommunicatorOptions options;
  options.segment_bytes = 64 * 1024;
  // Outputs above 1 MiB count as larger than the cache, so the ring's final blocks take the
  // streaming path (RecvStreaming) here too.
  options.streaming_bytes = 1 << 20;
  const CommBody body = [&](Communicator& comm) { return RunCases(comm, cases); };
  const absl::Status status =
      form == RankForm::kThreads
          ? RunOnThreads(kTestTransport, ranks, body, absl::Minutes(8), options)
          : RunOnProcesses(kTestTransport, ranks, body, absl::Minutes(8), options);
  INFO(cases.size() << " cases on " << ranks
                    << (form == RankForm::kThreads ? " threads" : " processes") << " over "
                    << TransportName(kTestTransport));
  INFO(status.ToString());
  REQUIRE(status.ok());
}

// Every type (an empty list) and op in the normal build. ThreadSanitizer runs these 20-50x
// slower and looks for races, which do not depend on the element type or the op: there one
// type per rank count, and sum and avg (the one op with a step of its own), stand for the rest.
// AddressSanitizer looks for accesses out of bounds, which depend on the element's width:
// there one type of each width (and both 16-bit floats) stands for the rest.
#if defined(__SANITIZE_THREAD__)
const std::vector<DataType> kTypesAt4 = {DataType::kFloat32};
const std::vector<DataType> kTypesAt3 = {DataType::kBFloat16};
const std::vector<ReduceOp> kOpsAt4 = {ReduceOp::kSum, ReduceOp::kAvg};
const std::vector<ReduceOp> kOpsAt3 = {ReduceOp::kAvg};
const std::vector<DataType> kTypesAsProcesses = {DataType::kFloat32};
const std::vector<ReduceOp> kOpsAsProcesses = {ReduceOp::kSum};
#else
#if defined(__SANITIZE_ADDRESS__)
const std::vector<DataType> kTypesAt4 = {DataType::kInt8, DataType::kFloat16, DataType::kBFloat16,
                                         DataType::kFloat32, DataType::kFloat64};
#else
const std::vector<DataType> kTypesAt4 = {};
#endif
const std::vector<DataType> kTypesAt3 = kTypesAt4;
const std::vector<ReduceOp> kOpsAt4 = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax};
const std::vector<ReduceOp> kOpsAt3 = {ReduceOp::kProd, ReduceOp::kAvg};
const std::vector<DataType> kTypesAsProcesses = {DataType::kFloat32, DataType::kBFloat16,
                                                 DataType::kInt8};
const std::vector<ReduceOp> kOpsAsProcesses = {ReduceOp::kSum, ReduceOp::kMin};
#endif

TEST_CASE("large messages, 4 ranks", "[large]") {
  RunLarge(RankForm::kThreads, 4, kTypesAt4, kOpsAt4);
}

TEST_CASE("large messages, 3 ranks", "[large]") {
  RunLarge(RankForm::kThreads, 3, kTypesAt3, kOpsAt3);
}

// BUILD defines CHORUS_TEST_PROCESSES for the transports that connect separate processes.
#ifdef CHORUS_TEST_PROCESSES
TEST_CASE("large messages, 3 ranks as processes", "[large]") {
  RunLarge(RankForm::kProcesses, 3, kTypesAsProcesses, kOpsAsProcesses);
}
#endif

}  // namespace
}  // namespace chorus::testing
