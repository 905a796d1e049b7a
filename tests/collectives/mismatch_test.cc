// Ranks that disagree about a collective (a different collective, count, type, op, root or
// forced algorithm) must all fail promptly with a MismatchError that names both views, never
// wait for the timeout and never write past a buffer. The rank whose own part of a collective
// can finish before the news reaches it (a broadcast root, say) fails its next call instead.
// A disagreement that only a broadcast root's check of its neighbour sees can be left to the
// root's next call (collectives.md), and a rank whose part of that call ended first fails the
// call after. Every test therefore follows the mismatched call with two barriers and looks at
// the first error.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <vector>

#include "absl/strings/match.h"
#include "chorus/core/status.h"
#include "tests/collectives/test_transport.h"

namespace chorus::testing {
namespace {

using Call = std::function<absl::Status(Communicator& comm, std::vector<float>& buffer)>;

// Rank r runs calls[r] (or calls.back()) on a 64-element buffer, then two barriers. Returns the
// first error of each rank.
std::vector<absl::Status> RunDisagreement(TransportKind transport, int ranks,
                                          const std::vector<Call>& calls, absl::Duration* elapsed) {
  CommunicatorOptions options;
  options.timeout = absl::Seconds(30);
  const auto start = std::chrono::steady_clock::now();
  std::vector<absl::Status> statuses = RunOnThreadsAll(
      transport, ranks,
      [&](Communicator& comm) -> absl::Status {
        // A guard zone after the 64 elements the calls use catches writes past the end.
        constexpr float kGuard = -7.0f;
        std::vector<float> buffer(64 + 32, kGuard);
        std::fill(buffer.begin(), buffer.begin() + 64, 1.0f);
        const Call& call = calls[std::min<size_t>(comm.rank(), calls.size() - 1)];
        absl::Status status = call(comm, buffer);
        if (status.ok()) status = comm.Barrier();
        if (status.ok()) status = comm.Barrier();
        for (size_t i = 64; i < buffer.size(); ++i) {
          if (buffer[i] != kGuard) return InternalError("a collective wrote past its buffer");
        }
        return status;
      },
      absl::Minutes(2), options);
  *elapsed = absl::FromChrono(std::chrono::steady_clock::now() - start);
  return statuses;
}

void ExpectAllMismatch(const std::vector<absl::Status>& statuses, absl::Duration elapsed) {
  INFO("took " << absl::FormatDuration(elapsed));
  CHECK(elapsed < absl::Seconds(10));  // the collective timeout is 30 s
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].ToString());
    CHECK(GetErrorKind(statuses[rank]) == ErrorKind::kMismatch);
    CHECK(absl::StrContains(statuses[rank].message(), "called"));
  }
}

Call AllReduceOf(size_t count, DataType type, ReduceOp op, std::string algorithm = "") {
  return [=](Communicator& comm, std::vector<float>& buffer) {
    CollectiveOptions options;
    options.algorithm = algorithm;
    return comm.AllReduce(buffer.data(), buffer.data(), count, type, op, options);
  };
}

Call BroadcastFrom(int root, size_t count = 64) {
  return [=](Communicator& comm, std::vector<float>& buffer) {
    return comm.Broadcast(buffer.data(), buffer.data(), count, DataType::kFloat32, root);
  };
}

Call ReduceTo(int root) {
  return [=](Communicator& comm, std::vector<float>& buffer) {
    return comm.Reduce(buffer.data(), buffer.data(), 64, DataType::kFloat32, ReduceOp::kSum, root);
  };
}

const TransportKind kTransport = kTestTransport;

TEST_CASE("allreduce on some ranks, broadcast on others", "[mismatch]") {
  absl::Duration elapsed;
  const Call allreduce = AllReduceOf(64, DataType::kFloat32, ReduceOp::kSum);
  auto statuses =
      RunDisagreement(kTransport, 4, {allreduce, allreduce, BroadcastFrom(0)}, &elapsed);
  ExpectAllMismatch(statuses, elapsed);
  WARN("example: " << statuses[0].message());
  bool named_both = false;
  for (const absl::Status& status : statuses) {
    named_both |= absl::StrContains(status.message(), "allreduce") &&
                  absl::StrContains(status.message(), "broadcast");
  }
  CHECK(named_both);
}

TEST_CASE("one rank with a different count", "[mismatch]") {
  absl::Duration elapsed;
  const Call normal = AllReduceOf(64, DataType::kFloat32, ReduceOp::kSum);
  auto statuses = RunDisagreement(
      kTransport, 5, {normal, normal, AllReduceOf(48, DataType::kFloat32, ReduceOp::kSum), normal},
      &elapsed);
  ExpectAllMismatch(statuses, elapsed);
  CHECK(absl::StrContains(statuses[2].message(), "count"));
}

TEST_CASE("one rank with a different type", "[mismatch]") {
  absl::Duration elapsed;
  const Call normal = AllReduceOf(64, DataType::kFloat32, ReduceOp::kSum);
  auto statuses = RunDisagreement(
      kTransport, 3, {normal, AllReduceOf(64, DataType::kInt32, ReduceOp::kSum), normal}, &elapsed);
  ExpectAllMismatch(statuses, elapsed);
  CHECK(absl::StrContains(statuses[1].message(), "type"));
}

TEST_CASE("one rank with a different op", "[mismatch]") {
  absl::Duration elapsed;
  const Call normal = AllReduceOf(64, DataType::kFloat32, ReduceOp::kSum, "ring");
  auto statuses = RunDisagreement(
      kTransport, 4,
      {normal, normal, normal, AllReduceOf(64, DataType::kFloat32, ReduceOp::kMax, "ring")},
      &elapsed);
  ExpectAllMismatch(statuses, elapsed);
  CHECK(absl::StrContains(statuses[3].message(), "op"));
}

TEST_CASE("ranks with different roots", "[mismatch]") {
  absl::Duration elapsed;
  auto statuses = RunDisagreement(kTransport, 4, {ReduceTo(1), ReduceTo(0)}, &elapsed);
  ExpectAllMismatch(statuses, elapsed);
  statuses = RunDisagreement(kTransport, 3, {BroadcastFrom(0), BroadcastFrom(0), BroadcastFrom(2)},
                             &elapsed);
  ExpectAllMismatch(statuses, elapsed);
}

// In a small binomial broadcast a rank whose parent sits below it on the header ring checks
// that parent's header instead of its ring predecessor's, and the predecessor sends none. A rank
// that disagrees about the root may then wait for a parent that sends it nothing: every
// disagreement must still be found promptly, whoever holds it.
TEST_CASE("small broadcasts where one rank disagrees about the root or the count", "[mismatch]") {
  for (int ranks : {4, 8}) {
    for (int odd = 1; odd < ranks; ++odd) {
      for (int other_root : {odd - 1, (odd + 1) % ranks, odd}) {
        if (other_root == 0) continue;  // no disagreement
        INFO(ranks << " ranks, rank " << odd << " broadcasts from " << other_root);
        std::vector<Call> calls(ranks, BroadcastFrom(0));
        calls[odd] = BroadcastFrom(other_root);
        absl::Duration elapsed;
        ExpectAllMismatch(RunDisagreement(kTransport, ranks, calls, &elapsed), elapsed);
      }
      INFO(ranks << " ranks, rank " << odd << " broadcasts 48 elements");
      std::vector<Call> calls(ranks, BroadcastFrom(0));
      calls[odd] = BroadcastFrom(0, 48);
      absl::Duration elapsed;
      ExpectAllMismatch(RunDisagreement(kTransport, ranks, calls, &elapsed), elapsed);
    }
  }
}

TEST_CASE("ranks forcing different algorithms", "[mismatch]") {
  absl::Duration elapsed;
  const Call ring = AllReduceOf(64, DataType::kFloat32, ReduceOp::kSum, "ring");
  auto statuses = RunDisagreement(
      kTransport, 4,
      {ring, AllReduceOf(64, DataType::kFloat32, ReduceOp::kSum, "recursive_doubling"), ring},
      &elapsed);
  ExpectAllMismatch(statuses, elapsed);
  CHECK(absl::StrContains(statuses[1].message(), "algorithm"));
}

TEST_CASE("a barrier against an allgather", "[mismatch]") {
  absl::Duration elapsed;
  const Call allgather = [](Communicator& comm, std::vector<float>& buffer) {
    return comm.AllGather(buffer.data(), buffer.data() + 0, 0, DataType::kFloat32);
  };
  const Call barrier = [](Communicator& comm, std::vector<float>&) { return comm.Barrier(); };
  auto statuses = RunDisagreement(kTransport, 6, {barrier, allgather}, &elapsed);
  ExpectAllMismatch(statuses, elapsed);
}

TEST_CASE("after a mismatch the communicator reports it at once", "[mismatch]") {
  const auto statuses = RunOnThreadsAll(
      kTransport, 3,
      [](Communicator& comm) -> absl::Status {
        std::vector<int32_t> data(8, 1);
        const size_t count = comm.rank() == 0 ? 4 : 8;
        const absl::Status first =
            comm.AllReduce(data.data(), data.data(), count, DataType::kInt32, ReduceOp::kSum);
        if (GetErrorKind(first) != ErrorKind::kMismatch) {
          return InternalError("expected a mismatch, got " + first.ToString());
        }
        const auto start = std::chrono::steady_clock::now();
        const absl::Status next = comm.Barrier();
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(1) ||
            GetErrorKind(next) != ErrorKind::kMismatch ||
            !absl::StrContains(next.message(), "broken")) {
          return InternalError("the next call should fail at once: " + next.ToString());
        }
        return absl::OkStatus();
      },
      absl::Minutes(1));
  for (const absl::Status& status : statuses) CHECK(status.ok());
}

}  // namespace
}  // namespace chorus::testing
