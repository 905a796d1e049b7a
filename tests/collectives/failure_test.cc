// Failures that are not mismatches: a collective whose peer never comes times out with a
// message naming the collective, its sequence number and the silent rank; Communicator::Abort
// on one rank ends the others' pending collectives promptly with the reason.
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "chorus/core/status.h"
#include "tests/collectives/test_transport.h"

namespace chorus::testing {
namespace {

const TransportKind kTransport = kTestTransport;

TEST_CASE("a collective whose peer never comes times out naming it", "[failure]") {
  const absl::Status status = RunOnThreads(
      kTransport, 3,
      [](Communicator& comm) -> absl::Status {
        int32_t token = 0;
        if (comm.rank() == 2) {  // stays alive but never calls the allreduce
          CHORUS_RETURN_IF_ERROR(comm.Recv(&token, 1, DataType::kInt32, 0, 1));
          return comm.Recv(&token, 1, DataType::kInt32, 1, 1);
        }
        const int other = 1 - comm.rank();
        std::vector<float> data(1000, 1.0f);
        CollectiveOptions options;
        options.timeout = absl::Milliseconds(300);
        options.algorithm = "ring";
        const auto start = std::chrono::steady_clock::now();
        const absl::Status timed_out = comm.AllReduce(data.data(), data.data(), data.size(),
                                                      DataType::kFloat32, ReduceOp::kSum, options);
        const auto took = std::chrono::steady_clock::now() - start;
        CHORUS_RETURN_IF_ERROR(
            Expect(GetErrorKind(timed_out) == ErrorKind::kDeadlineExceeded, timed_out.ToString()));
        CHORUS_RETURN_IF_ERROR(
            Expect(took >= std::chrono::milliseconds(300) && took < std::chrono::seconds(3),
                   "timed out at the wrong time"));
        CHORUS_RETURN_IF_ERROR(
            Expect(absl::StrContains(timed_out.message(), "allreduce #0"), timed_out.ToString()));
        // The ring algorithm has rank 0 receive from rank 2 (silent): rank 0 must name rank 2.
        if (comm.rank() == 0) {
          CHORUS_RETURN_IF_ERROR(
              Expect(absl::StrContains(timed_out.message(), "rank 2"), timed_out.ToString()));
        }
        // Both timed-out ranks stay connected until the other has timed out too (a rank that
        // leaves early would turn the other's timeout into "connection closed").
        int32_t theirs = 0;
        WorkPtr sent = comm.SendAsync(&token, 1, DataType::kInt32, other, 2);
        CHORUS_RETURN_IF_ERROR(comm.Recv(&theirs, 1, DataType::kInt32, other, 2));
        CHORUS_RETURN_IF_ERROR(sent->Wait());
        return comm.Send(&token, 1, DataType::kInt32, 2, 1);
      },
      absl::Minutes(1));
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("Communicator::Abort on one rank ends everyone's pending collective", "[failure]") {
  const auto statuses = RunOnThreadsAll(
      kTransport, 4,
      [](Communicator& comm) -> absl::Status {
        if (comm.rank() == 3) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          comm.Abort("the operator pressed stop");
          return absl::OkStatus();
        }
        std::vector<double> data(64, 1.0);
        const auto start = std::chrono::steady_clock::now();
        const absl::Status status = comm.AllReduce(data.data(), data.data(), data.size(),
                                                   DataType::kFloat64, ReduceOp::kSum);
        const auto took = std::chrono::steady_clock::now() - start;
        CHORUS_RETURN_IF_ERROR(Expect(took < std::chrono::seconds(5), "abort was slow"));
        CHORUS_RETURN_IF_ERROR(
            Expect(GetErrorKind(status) == ErrorKind::kAborted, status.ToString()));
        return Expect(absl::StrContains(status.message(), "the operator pressed stop"),
                      status.ToString());
      },
      absl::Minutes(1));
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].ToString());
    CHECK(statuses[rank].ok());
  }
}

}  // namespace
}  // namespace chorus::testing
