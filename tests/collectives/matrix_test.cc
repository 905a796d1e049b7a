// The full matrix at small sizes (0, 1, 7, 1000 elements), ranks as threads: every collective x
// algorithm x type x op x placement, 1 to 9 ranks, over the target's transport. Targets pick
// rank counts by tag so that several run in parallel.
#include <catch2/catch.hpp>

#include "tests/collectives/cases.h"
#include "tests/collectives/test_transport.h"

namespace chorus::testing {
namespace {

void RunMatrix(int ranks) {
  const std::vector<Case> cases = BuildCases(Matrix{}, ranks);
  const absl::Status status = RunOnThreads(
      kTestTransport, ranks, [&](Communicator& comm) { return RunCases(comm, cases); },
      absl::Minutes(5));
  INFO(cases.size() << " cases on " << ranks << " ranks over " << TransportName(kTestTransport));
  CHECK(status.ok());
  if (!status.ok()) FAIL(status.ToString());
}

TEST_CASE("matrix, 1 rank", "[r1]") { RunMatrix(1); }
TEST_CASE("matrix, 2 ranks", "[r2]") { RunMatrix(2); }
TEST_CASE("matrix, 3 ranks", "[r3]") { RunMatrix(3); }
TEST_CASE("matrix, 4 ranks", "[r4]") { RunMatrix(4); }
TEST_CASE("matrix, 5 ranks", "[r5]") { RunMatrix(5); }
TEST_CASE("matrix, 6 ranks", "[r6]") { RunMatrix(6); }
TEST_CASE("matrix, 7 ranks", "[r7]") { RunMatrix(7); }
TEST_CASE("matrix, 8 ranks", "[r8]") { RunMatrix(8); }
TEST_CASE("matrix, 9 ranks", "[r9]") { RunMatrix(9); }

}  // namespace
}  // namespace chorus::testing
