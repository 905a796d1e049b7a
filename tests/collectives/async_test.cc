// Asynchronous collectives: several in flight on one communicator (more than worker threads),
// Work::Wait with a timeout while a peer is late, Test, Abort (running and not yet started),
// and the chosen algorithm and sequence number on the handle.
#include <catch2/catch.hpp>
#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "tests/collectives/test_transport.h"
#include "tests/transport/captured_log.h"

namespace chorus::testing {
namespace {

const TransportKind kTransport = kTestTransport;

TEST_CASE("several collectives in flight complete with the right data", "[async]") {
  CommunicatorOptions options;
  options.worker_threads = 2;
  const absl::Status status = RunOnThreads(
      kTransport, 4,
      [](Communicator& comm) -> absl::Status {
        const int p = comm.size();
        const int r = comm.rank();
        std::vector<int32_t> sum(1000, r + 1), gathered(4 * p), bcast(300, r == 2 ? 9 : 0);
        std::vector<int32_t> mine(4, r), a2a_in(p * 3), a2a_out(p * 3);
        for (int i = 0; i < p * 3; ++i) a2a_in[i] = r * 100 + i;
        std::vector<float> rs_in(p * 5, 1.5f), rs_out(5);
        CollectiveOptions ring;
        ring.algorithm = "ring";
        std::vector<WorkPtr> works = {
            comm.AllReduceAsync(sum.data(), sum.data(), sum.size(), DataType::kInt32,
                                ReduceOp::kSum, ring),
            comm.AllGatherAsync(mine.data(), gathered.data(), 4, DataType::kInt32),
            comm.BroadcastAsync(bcast.data(), bcast.data(), bcast.size(), DataType::kInt32, 2),
            comm.ReduceScatterAsync(rs_in.data(), rs_out.data(), 5, DataType::kFloat32,
                                    ReduceOp::kSum),
            comm.AllToAllAsync(a2a_in.data(), a2a_out.data(), 3, DataType::kInt32),
            comm.BarrierAsync(),
        };
        for (size_t i = 0; i < works.size(); ++i) {
          CHORUS_RETURN_IF_ERROR(Expect(works[i]->sequence() == i, "sequence numbers"));
        }
        CHORUS_RETURN_IF_ERROR(Expect(works[0]->algorithm() == "ring", "forced algorithm"));
        CHORUS_RETURN_IF_ERROR(
            Expect(absl::StrContains(works[0]->description(), "#0"), works[0]->description()));
        for (auto it = works.rbegin(); it != works.rend(); ++it) {
          CHORUS_RETURN_IF_ERROR((*it)->Wait());
          CHORUS_RETURN_IF_ERROR(Expect((*it)->Test(), "Test() after Wait()"));
        }
        const int32_t total = p * (p + 1) / 2;
        for (int32_t v : sum) CHORUS_RETURN_IF_ERROR(Expect(v == total, "allreduce"));
        for (int i = 0; i < 4 * p; ++i) {
          CHORUS_RETURN_IF_ERROR(Expect(gathered[i] == i / 4, "allgather"));
        }
        for (int32_t v : bcast) CHORUS_RETURN_IF_ERROR(Expect(v == 9, "broadcast"));
        for (float v : rs_out) CHORUS_RETURN_IF_ERROR(Expect(v == 1.5f * p, "reduce_scatter"));
        for (int q = 0; q < p; ++q) {
          for (int i = 0; i < 3; ++i) {
            CHORUS_RETURN_IF_ERROR(Expect(a2a_out[q * 3 + i] == q * 100 + r * 3 + i, "alltoall"));
          }
        }
        return absl::OkStatus();
      },
      absl::Minutes(1), options);
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("Wait with a timeout reports a late peer and the work goes on", "[async]") {
  const absl::Status status = RunOnThreads(
      kTransport, 2,
      [](Communicator& comm) -> absl::Status {
        std::vector<double> data(16, comm.rank());
        if (comm.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
        WorkPtr work = comm.AllReduceAsync(data.data(), data.data(), data.size(),
                                           DataType::kFloat64, ReduceOp::kMax);
        if (comm.rank() == 0) {
          const absl::Status early = work->Wait(absl::Milliseconds(20));
          CHORUS_RETURN_IF_ERROR(Expect(GetErrorKind(early) == ErrorKind::kDeadlineExceeded,
                                        "early wait: " + early.ToString()));
          CHORUS_RETURN_IF_ERROR(
              Expect(absl::StrContains(early.message(), "still running"), early.ToString()));
          CHORUS_RETURN_IF_ERROR(Expect(!work->Test(), "Test() while the peer is late"));
        }
        CHORUS_RETURN_IF_ERROR(work->Wait(absl::Seconds(20)));
        return Expect(data[5] == 1.0, "result");
      },
      absl::Minutes(1));
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("Abort ends running and queued work promptly", "[async]") {
  CommunicatorOptions options;
  options.worker_threads = 1;
  const absl::Status status = RunOnThreads(
      kTransport, 2,
      [](Communicator& comm) -> absl::Status {
        int32_t done = 0;
        if (comm.rank() == 1) {  // never joins the collectives; stays up until rank 0 is done
          return comm.Recv(&done, 1, DataType::kInt32, 0, /*tag=*/7);
        }
        std::vector<float> data(8, 1.0f);
        WorkPtr running =
            comm.AllReduceAsync(data.data(), data.data(), 8, DataType::kFloat32, ReduceOp::kSum);
        WorkPtr queued = comm.BarrierAsync();  // behind `running` on the single worker
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        const auto start = std::chrono::steady_clock::now();
        queued->Abort();
        running->Abort();
        const absl::Status first = running->Wait(absl::Seconds(5));
        const absl::Status second = queued->Wait(absl::Seconds(5));
        const auto took = std::chrono::steady_clock::now() - start;
        CHORUS_RETURN_IF_ERROR(Expect(took < std::chrono::seconds(2), "abort was slow"));
        CHORUS_RETURN_IF_ERROR(
            Expect(GetErrorKind(first) == ErrorKind::kAborted, "running: " + first.ToString()));
        CHORUS_RETURN_IF_ERROR(
            Expect(absl::StrContains(first.message(), "aborted by the caller"), first.ToString()));
        CHORUS_RETURN_IF_ERROR(
            Expect(GetErrorKind(second) == ErrorKind::kAborted, "queued: " + second.ToString()));
        // A local abort does not break the communicator: point-to-point still works.
        return comm.Send(&done, 1, DataType::kInt32, 1, /*tag=*/7);
      },
      absl::Minutes(1), options);
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("a communicator destroyed right after Wait is not aborted", "[async]") {
  // The pool thread still holds the finished task for a moment after Wait returns; the
  // communicator used to count that as pending work and abort the mesh ("is broken").
  CapturedLog log("warn");
  for (int round = 0; round < 20; ++round) {
    const absl::Status status = RunOnThreads(
        kTransport, 2,
        [](Communicator& comm) -> absl::Status {
          int64_t value = 1;
          return comm.AllReduceAsync(&value, &value, 1, DataType::kInt64, ReduceOp::kSum)->Wait();
        },
        absl::Minutes(1));
    INFO("round " << round << ": " << status.ToString());
    REQUIRE(status.ok());
  }
  const std::string text = log.Read();
  INFO(text);
  CHECK(!absl::StrContains(text, "is broken"));
  CHECK(!absl::StrContains(text, "destroyed with operations pending"));
}

TEST_CASE("invalid arguments fail the call without taking a sequence number", "[async]") {
  const absl::Status status = RunOnThreads(
      kTransport, 2,
      [](Communicator& comm) -> absl::Status {
        std::vector<int32_t> data(4, 1);
        WorkPtr bad = comm.BroadcastAsync(data.data(), data.data(), 4, DataType::kInt32, 5);
        CHORUS_RETURN_IF_ERROR(Expect(bad->Test(), "an invalid call is done at once"));
        CHORUS_RETURN_IF_ERROR(
            Expect(GetErrorKind(bad->Wait()) == ErrorKind::kInvalidArgument, "invalid root"));
        const absl::Status overlap =
            comm.AllReduce(data.data(), data.data() + 1, 3, DataType::kInt32, ReduceOp::kSum);
        CHORUS_RETURN_IF_ERROR(Expect(GetErrorKind(overlap) == ErrorKind::kInvalidArgument,
                                      "overlap: " + overlap.ToString()));
        const absl::Status null_buffer =
            comm.AllReduce(nullptr, data.data(), 4, DataType::kInt32, ReduceOp::kSum);
        CHORUS_RETURN_IF_ERROR(Expect(GetErrorKind(null_buffer) == ErrorKind::kInvalidArgument,
                                      "null: " + null_buffer.ToString()));
        // Still in step: the next collective is #0 on both ranks.
        WorkPtr good =
            comm.AllReduceAsync(data.data(), data.data(), 4, DataType::kInt32, ReduceOp::kSum);
        CHORUS_RETURN_IF_ERROR(Expect(good->sequence() == 0, "sequence after errors"));
        CHORUS_RETURN_IF_ERROR(good->Wait());
        return Expect(data[0] == 2, "result");
      },
      absl::Minutes(1));
  INFO(status.ToString());
  CHECK(status.ok());
}

}  // namespace
}  // namespace chorus::testing
