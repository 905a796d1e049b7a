#include "tests/harness/multirank.h"

#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"

namespace chorus::testing {
namespace {

TEST_CASE("thread ranks report their own statuses") {
  const auto statuses = RunRanksAsThreads(
      4,
      [](int rank) {
        return rank == 2 ? absl::InternalError("rank 2 failed") : absl::OkStatus();
      },
      absl::Seconds(10));
  REQUIRE(statuses.size() == 4);
  CHECK(statuses[0].ok());
  CHECK(statuses[2].message() == "rank 2 failed");
}

TEST_CASE("process ranks report exit, error text, signals and timeouts") {
  RankProcesses processes(4, [](int rank) -> absl::Status {
    if (rank == 1) return absl::InternalError(absl::StrCat("rank ", rank, " broke"));
    if (rank >= 2) pause();  // waits for a signal or the timeout
    return absl::OkStatus();
  });
  processes.Signal(2, SIGKILL);
  const auto outcomes = processes.Wait(absl::Milliseconds(500));
  CHECK(outcomes[0].ok());
  CHECK_FALSE(outcomes[1].ok());
  CHECK(absl::StrContains(outcomes[1].message, "rank 1 broke"));
  CHECK(outcomes[2].term_signal == SIGKILL);
  CHECK_FALSE(outcomes[2].timed_out);
  CHECK(outcomes[3].timed_out);
  CHECK(kill(outcomes[3].pid, 0) != 0);  // reaped: no such process any more
}

TEST_CASE("temp dirs and free ports") {
  std::string path;
  {
    TempDir dir;
    path = dir.path();
    CHECK(access(path.c_str(), W_OK) == 0);
  }
  CHECK(access(path.c_str(), F_OK) != 0);
  const int port = PickFreeLoopbackPort();
  CHECK(port > 0);
  CHECK(port < 65536);
}

}  // namespace
}  // namespace chorus::testing
