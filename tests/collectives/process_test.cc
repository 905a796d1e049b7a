// Ranks as separate processes over TCP (a FileStore directory for the rendezvous): the full
// matrix at 1 to 9 ranks (targets pick rank counts by tag), a mismatch, and a rank killed in
// the middle of a loop of collectives, which the survivors must report promptly, naming it.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/file_store.h"
#include "tests/collectives/cases.h"
#include "tests/collectives/world.h"
#include "tests/harness/multirank.h"

namespace chorus::testing {
namespace {

void RunProcessMatrix(int ranks) {
  const std::vector<Case> cases = BuildCases(Matrix{}, ranks);
  const absl::Status status = RunOnProcesses(
      TransportKind::kTcp, ranks, [&](Communicator& comm) { return RunCases(comm, cases); },
      absl::Minutes(5));
  INFO(cases.size() << " cases on " << ranks << " processes: " << status.ToString());
  CHECK(status.ok());
}

TEST_CASE("matrix over tcp, 1 process", "[p1]") { RunProcessMatrix(1); }
TEST_CASE("matrix over tcp, 2 processes", "[p2]") { RunProcessMatrix(2); }
TEST_CASE("matrix over tcp, 3 processes", "[p3]") { RunProcessMatrix(3); }
TEST_CASE("matrix over tcp, 4 processes", "[p4]") { RunProcessMatrix(4); }
TEST_CASE("matrix over tcp, 5 processes", "[p5]") { RunProcessMatrix(5); }
TEST_CASE("matrix over tcp, 6 processes", "[p6]") { RunProcessMatrix(6); }
TEST_CASE("matrix over tcp, 7 processes", "[p7]") { RunProcessMatrix(7); }
TEST_CASE("matrix over tcp, 8 processes", "[p8]") { RunProcessMatrix(8); }
TEST_CASE("matrix over tcp, 9 processes", "[p9]") { RunProcessMatrix(9); }

TEST_CASE("a mismatch between processes fails every rank promptly", "[failures]") {
  CommunicatorOptions options;
  options.timeout = absl::Seconds(30);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = RunOnProcesses(
      TransportKind::kTcp, 4,
      [](Communicator& comm) -> absl::Status {
        std::vector<float> data(100, 1.0f);
        absl::Status result =
            comm.rank() == 1
                ? comm.Broadcast(data.data(), data.data(), 100, DataType::kFloat32, 0)
                : comm.AllReduce(data.data(), data.data(), 100, DataType::kFloat32, ReduceOp::kSum);
        if (result.ok()) result = comm.Barrier();
        if (GetErrorKind(result) != ErrorKind::kMismatch) {
          return InternalError("expected a mismatch, got " + result.ToString());
        }
        return absl::OkStatus();
      },
      absl::Minutes(2), options);
  const auto took = std::chrono::steady_clock::now() - start;
  INFO(status.ToString());
  CHECK(status.ok());
  CHECK(took < std::chrono::seconds(15));
}

TEST_CASE("a killed rank is reported promptly by every survivor", "[failures]") {
  TempDir dir;
  const std::string name = "killed";
  constexpr int kRanks = 4;
  constexpr int kVictim = 2;
  RankProcesses processes(kRanks, [&](int rank) -> absl::Status {
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store, FileStore::Open(dir.path()));
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, MakeDevice(TransportKind::kTcp, rank));
    CommunicatorOptions options;
    options.timeout = absl::Seconds(30);
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                            Communicator::Create(*store, name, *device, rank, kRanks, options));
    std::vector<float> data(1 << 16, 1.0f);
    absl::Status status;
    std::chrono::steady_clock::time_point last_ok = std::chrono::steady_clock::now();
    for (int i = 0; i < 100000 && status.ok(); ++i) {
      status = comm->AllReduce(data.data(), data.data(), data.size(), DataType::kFloat32,
                               ReduceOp::kMax);
      if (status.ok()) last_ok = std::chrono::steady_clock::now();
    }
    const auto noticed = std::chrono::steady_clock::now() - last_ok;
    if (status.ok()) return InternalError("the loop ended without an error");
    if (noticed > std::chrono::seconds(5)) {
      return InternalError(absl::StrCat("noticed the death only after ",
                                        std::chrono::duration<double>(noticed).count(), " s"));
    }
    if (!absl::StrContains(status.message(), absl::StrCat("rank ", kVictim))) {
      return InternalError("the error does not name the dead rank: " + status.ToString());
    }
    return absl::OkStatus();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  processes.Signal(kVictim, SIGKILL);
  const std::vector<ProcessOutcome> outcomes = processes.Wait(absl::Minutes(1));
  for (const ProcessOutcome& outcome : outcomes) {
    INFO(outcome.Describe());
    if (outcome.rank == kVictim) {
      CHECK(outcome.term_signal == SIGKILL);
    } else {
      CHECK(outcome.ok());
    }
  }
}

}  // namespace
}  // namespace chorus::testing
