// The hierarchical algorithm over the target's transport, on simulated host layouts
// (CommunicatorOptions::host_of_rank): even (2+2, 3+3 interleaved), uneven (3+1+2, 1+2+2 with
// arbitrary labels), one rank per host (1+1+1) and one host; every collective it implements
// (the v forms with uneven and empty blocks),
// several types and ops, roots that rotate over all ranks, counts not divisible by the rank or
// host counts, zero counts, in and out of place, small segments so the phases pipeline; each
// output exact on every rank. Also: a bad layout is refused. Ranks are threads; with
// CHORUS_TEST_PROCESSES also forked processes. A rank that never joins is named by its
// communicator rank, not its rank within a phase's group; ranks given different layouts fail
// with a MismatchError. (When the selector takes it:
// selector_test.)
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/memory_store.h"
#include "tests/collectives/cases.h"
#include "tests/collectives/test_transport.h"
#include "tests/harness/multirank.h"

namespace chorus::testing {
namespace {

const std::vector<CollectiveKind> kHierarchicalKinds = {
    CollectiveKind::kAllReduce,     CollectiveKind::kBroadcast,  CollectiveKind::kReduce,
    CollectiveKind::kAllGather,     CollectiveKind::kAllGatherV, CollectiveKind::kReduceScatter,
    CollectiveKind::kReduceScatterV};

Matrix HierarchicalMatrix() {
  Matrix matrix;
  matrix.kinds = kHierarchicalKinds;
  matrix.algorithms = {"hierarchical"};
  matrix.types = {DataType::kInt32, DataType::kFloat32, DataType::kBFloat16, DataType::kUint8};
  matrix.ops = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kAvg};
  matrix.counts = {0, 1, 7, 1000, 4099};
  return matrix;
}

CommunicatorOptions Layout(const std::vector<int>& host_of_rank) {
  CommunicatorOptions options;
  options.host_of_rank = host_of_rank;
  // Small segments and a short pipeline: the phases' algorithms cut 4099 elements into many
  // segments, with receives posted ahead across phases.
  options.segment_bytes = 1024;
  options.pipeline_depth = 4;
  return options;
}

void RunLayout(const std::vector<int>& host_of_rank, bool processes = false) {
  const int ranks = static_cast<int>(host_of_rank.size());
  const std::vector<Case> cases = BuildCases(HierarchicalMatrix(), ranks);
  const CommBody body = [&](Communicator& comm) { return RunCases(comm, cases); };
  const absl::Status status =
      processes
          ? RunOnProcesses(kTestTransport, ranks, body, absl::Minutes(4), Layout(host_of_rank))
          : RunOnThreads(kTestTransport, ranks, body, absl::Minutes(4), Layout(host_of_rank));
  INFO(cases.size() << " cases on hosts {" << absl::StrJoin(host_of_rank, ",") << "} over "
                    << TransportName(kTestTransport) << (processes ? " (processes)" : "") << ": "
                    << status.ToString());
  CHECK(status.ok());
}

TEST_CASE("hierarchical: 2 hosts of 2 ranks", "[hierarchical]") { RunLayout({0, 0, 1, 1}); }
TEST_CASE("hierarchical: 3 hosts of 3, 1 and 2 ranks", "[hierarchical]") {
  RunLayout({0, 0, 0, 1, 2, 2});
}
TEST_CASE("hierarchical: 2 interleaved hosts of 3 ranks", "[hierarchical]") {
  RunLayout({0, 1, 0, 1, 0, 1});
}
TEST_CASE("hierarchical: uneven hosts with arbitrary labels, not in rank order", "[hierarchical]") {
  RunLayout({7, 3, 3, 7, 9});
}
TEST_CASE("hierarchical: one rank per host", "[hierarchical]") { RunLayout({0, 1, 2}); }
TEST_CASE("hierarchical: every rank on one host (degenerates to the flat phases)",
          "[hierarchical]") {
  RunLayout({0, 0, 0, 0});
}
TEST_CASE("hierarchical: one rank", "[hierarchical]") { RunLayout({0}); }

#ifdef CHORUS_TEST_PROCESSES
TEST_CASE("hierarchical: ranks as processes, 3 hosts of 2, 1 and 2 ranks", "[hierarchical]") {
  RunLayout({0, 0, 1, 2, 2}, /*processes=*/true);
}
#endif

TEST_CASE("a rank missing from a phase is named by its communicator rank", "[hierarchical]") {
  CommunicatorOptions options = Layout({0, 0, 1, 1});
  options.timeout = absl::Milliseconds(800);
  const absl::Status status = RunOnThreads(
      kTestTransport, 4,
      [](Communicator& comm) -> absl::Status {
        // Every rank keeps its communicator until all deadlines have passed: one that closed
        // early would fail its peers with kPeerUnavailable instead.
        const absl::Time end = absl::Now() + absl::Seconds(2);
        if (comm.rank() == 3) {  // never calls: ranks 1 and 2 wait for it, rank 0 for rank 2
          absl::SleepFor(end - absl::Now());
          return absl::OkStatus();
        }
        CollectiveOptions forced;
        forced.algorithm = "hierarchical";
        std::vector<int32_t> data(1000, 1);
        const absl::Status result = comm.AllReduce(data.data(), data.data(), data.size(),
                                                   DataType::kInt32, ReduceOp::kSum, forced);
        // Rank 2 waits in phase 1 (its host) for rank 3; rank 1 for rank 3 too, for its data
        // in phase 2 (its slice) or for its header, rank 3 being rank 1's successor on the
        // header ring; rank 0 waits for rank 2 in phase 2.
        absl::SleepFor(end - absl::Now());
        const int silent = comm.rank() == 0 ? 2 : 3;
        const std::string message(result.message());
        CHORUS_RETURN_IF_ERROR(
            Expect(GetErrorKind(result) == ErrorKind::kDeadlineExceeded, result.ToString()));
        CHORUS_RETURN_IF_ERROR(Expect(ErrorPeerRank(result) == silent, result.ToString()));
        return Expect(absl::StrContains(message, "allreduce #0 (hierarchical") &&
                          absl::StrContains(message, absl::StrCat("rank ", comm.rank(), ":")) &&
                          (absl::StrContains(message, absl::StrCat("from rank ", silent)) ||
                           absl::StrContains(message, absl::StrCat("to rank ", silent))),
                      message);
      },
      absl::Minutes(1), options);
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("ranks that disagree about the hosts fail with a mismatch", "[hierarchical]") {
  MemoryStore store;
  // Ranks 0 and 1 see hosts {0,1} {2,3}; ranks 2 and 3 see {0,2} {1,3}.
  const std::vector<absl::Status> statuses = RunRanksAsThreads(
      4,
      [&](int rank) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, MakeDevice(kTestTransport, rank));
        CommunicatorOptions options =
            Layout(rank < 2 ? std::vector<int>{0, 0, 1, 1} : std::vector<int>{0, 1, 0, 1});
        options.timeout = absl::Seconds(20);
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                                Communicator::Create(store, "disagree", *device, rank, 4, options));
        CollectiveOptions forced;
        forced.algorithm = "hierarchical";
        std::vector<int32_t> data(1000, 1);
        const absl::Status result = comm->AllReduce(data.data(), data.data(), data.size(),
                                                    DataType::kInt32, ReduceOp::kSum, forced);
        CHORUS_RETURN_IF_ERROR(
            Expect(GetErrorKind(result) == ErrorKind::kMismatch, result.ToString()));
        return Expect(absl::StrContains(result.message(), "host layouts differ"),
                      result.ToString());
      },
      absl::Minutes(1));
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].ToString());
    CHECK(statuses[rank].ok());
  }
}

TEST_CASE("a host layout of the wrong length is refused", "[hierarchical]") {
  const absl::Status status = RunOnThreads(
      kTestTransport, 2, [](Communicator&) { return absl::OkStatus(); }, absl::Minutes(1),
      Layout({0, 0, 1}));
  INFO(status.ToString());
  CHECK(GetErrorKind(status) == ErrorKind::kInvalidArgument);
  CHECK(absl::StrContains(status.message(), "host_of_rank"));
}

}  // namespace
}  // namespace chorus::testing
