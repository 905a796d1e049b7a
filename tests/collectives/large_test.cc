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

// Every type (an empty list) in the normal build. ThreadSanitizer runs these 20-50x slower,
// past the test's time limit, and looks for races, which do not depend on the element type:
// there two types per rank count stand for the rest (a 32-bit and a 16-bit float at 4 ranks,
// a 64-bit integer and a 16-bit float at 3).
#if defined(__SANITIZE_THREAD__)
const std::vector<DataType> kTypesAt4 = {DataType::kFloat32, DataType::kBFloat16};
const std::vector<DataType> kTypesAt3 = {DataType::kInt64, DataType::kFloat16};
#else
const std::vector<DataType> kTypesAt4 = {};
const std::vector<DataType> kTypesAt3 = {};
#endif

TEST_CASE("large messages, 4 ranks: every type, sum / min / max", "[large]") {
  RunLarge(RankForm::kThreads, 4, kTypesAt4, {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax});
}

TEST_CASE("large messages, 3 ranks: every type, prod / avg", "[large]") {
  RunLarge(RankForm::kThreads, 3, kTypesAt3, {ReduceOp::kProd, ReduceOp::kAvg});
}

// BUILD defines CHORUS_TEST_PROCESSES for the transports that connect separate processes.
#ifdef CHORUS_TEST_PROCESSES
TEST_CASE("large messages, 3 ranks as processes", "[large]") {
  RunLarge(RankForm::kProcesses, 3, {DataType::kFloat32, DataType::kBFloat16, DataType::kInt8},
           {ReduceOp::kSum, ReduceOp::kMin});
}
#endif

}  // namespace
}  // namespace chorus::testing
