// Small first messages ride in the header message (collectives/engine/context.h): collectives at
// and around the size limit stay exact for every algorithm, a rank whose first message is large
// still works, and ranks whose headers or message lengths disagree fail with a MismatchError
// (promptly, never a timeout or a crash), also when the data came inside the header.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/collectives/engine/context.h"
#include "chorus/core/status.h"
#include "tests/collectives/test_transport.h"

namespace chorus::testing {
namespace {

const TransportKind kTransport = kTestTransport;

// The piggyback limit of communicators over kTransport (1 KiB, 16 KiB over TCP); 0 when no
// device could be made.
size_t Limit() {
  static const size_t limit = [] {
    absl::StatusOr<std::unique_ptr<Device>> device = MakeDevice(kTransport, 0);
    return device.ok() ? PiggybackBytesFor((*device)->Links()) : 0;
  }();
  REQUIRE(limit > 0);
  return limit;
}

// Element counts of int32 around the limit: under, at and over it, per message.
std::vector<size_t> CountsAroundLimit() {
  const size_t at = Limit() / sizeof(int32_t);
  return {1, at - 1, at, at + 1};
}

int32_t Value(int rank, size_t i) { return static_cast<int32_t>(rank * 1000 + i % 997); }

TEST_CASE("a device's piggyback limit is its smaller link's, within bounds", "[piggyback]") {
  LinkProfile network;
  network.piggyback_bytes = 16 << 10;
  LinkProfile local;
  local.piggyback_bytes = 2 << 10;
  CHECK(PiggybackBytesFor({network, network}) == (16 << 10));
  CHECK(PiggybackBytesFor({network, local}) == (2 << 10));
  CHECK(PiggybackBytesFor({LinkProfile{}, LinkProfile{}}) == kPiggybackBytes);  // unset
  LinkProfile greedy;
  greedy.piggyback_bytes = size_t{1} << 30;
  CHECK(PiggybackBytesFor({greedy, greedy}) == kMostPiggybackBytes);
}

TEST_CASE("collectives around the piggyback limit stay exact for every algorithm", "[piggyback]") {
  const std::vector<size_t> counts = CountsAroundLimit();
  for (int ranks : {2, 3}) {
    const absl::Status status = RunOnThreads(
        kTransport, ranks,
        [&counts](Communicator& comm) -> absl::Status {
          const int p = comm.size();
          const int r = comm.rank();
          for (size_t count : counts) {
            for (const std::string& algorithm :
                 Communicator::Algorithms(CollectiveKind::kAllReduce)) {
              CollectiveOptions options;
              options.algorithm = algorithm;
              std::vector<int32_t> in(count), out(count, -1);
              for (size_t i = 0; i < count; ++i) in[i] = Value(r, i);
              CHORUS_RETURN_IF_ERROR(comm.AllReduce(in.data(), out.data(), count, DataType::kInt32,
                                                    ReduceOp::kSum, options));
              for (size_t i = 0; i < count; ++i) {
                int32_t want = 0;
                for (int k = 0; k < p; ++k) want += Value(k, i);
                CHORUS_RETURN_IF_ERROR(Expect(
                    out[i] == want, absl::StrCat("allreduce ", algorithm, " count ", count,
                                                 " element ", i, ": ", out[i], " != ", want)));
              }
            }
            for (const std::string& algorithm :
                 Communicator::Algorithms(CollectiveKind::kBroadcast)) {
              CollectiveOptions options;
              options.algorithm = algorithm;
              const int root = p - 1;
              std::vector<int32_t> data(count, -1);
              if (r == root) {
                for (size_t i = 0; i < count; ++i) data[i] = Value(root, i);
              }
              CHORUS_RETURN_IF_ERROR(
                  comm.Broadcast(data.data(), data.data(), count, DataType::kInt32, root, options));
              for (size_t i = 0; i < count; ++i) {
                CHORUS_RETURN_IF_ERROR(Expect(
                    data[i] == Value(root, i),
                    absl::StrCat("broadcast ", algorithm, " count ", count, " element ", i)));
              }
            }
            for (const std::string& algorithm :
                 Communicator::Algorithms(CollectiveKind::kAllGather)) {
              CollectiveOptions options;
              options.algorithm = algorithm;
              std::vector<int32_t> mine(count), all(count * p, -1);
              for (size_t i = 0; i < count; ++i) mine[i] = Value(r, i);
              CHORUS_RETURN_IF_ERROR(
                  comm.AllGather(mine.data(), all.data(), count, DataType::kInt32, options));
              for (int k = 0; k < p; ++k) {
                for (size_t i = 0; i < count; ++i) {
                  CHORUS_RETURN_IF_ERROR(Expect(
                      all[k * count + i] == Value(k, i),
                      absl::StrCat("allgather ", algorithm, " count ", count, " block ", k)));
                }
              }
            }
            std::vector<int32_t> send(count * p), recv(count * p, -1);
            for (int k = 0; k < p; ++k) {
              for (size_t i = 0; i < count; ++i) send[k * count + i] = Value(r, k * count + i);
            }
            CHORUS_RETURN_IF_ERROR(
                comm.AllToAll(send.data(), recv.data(), count, DataType::kInt32));
            for (int k = 0; k < p; ++k) {
              for (size_t i = 0; i < count; ++i) {
                CHORUS_RETURN_IF_ERROR(Expect(recv[k * count + i] == Value(k, r * count + i),
                                              absl::StrCat("alltoall count ", count, " from ", k)));
              }
            }
            CHORUS_RETURN_IF_ERROR(comm.Barrier());
          }
          return absl::OkStatus();
        },
        absl::Minutes(2));
    INFO(ranks << " ranks: " << status.ToString());
    CHECK(status.ok());
  }
}

// Two ranks exchange `to_one` elements from rank 0 to rank 1 and `to_zero` back with
// alltoallv, rank 1 expecting `one_expects` from rank 0. Returns each rank's first error (the
// alltoallv's, else a following barrier's) and checks the data where the lengths agree.
std::vector<absl::Status> ExchangeV(size_t to_one, size_t to_zero, size_t one_expects,
                                    absl::Duration* elapsed) {
  CommunicatorOptions options;
  options.timeout = absl::Seconds(30);
  const auto start = std::chrono::steady_clock::now();
  std::vector<absl::Status> statuses = RunOnThreadsAll(
      kTransport, 2,
      [&](Communicator& comm) -> absl::Status {
        const int r = comm.rank();
        const size_t send_other = r == 0 ? to_one : to_zero;
        const size_t recv_other = r == 0 ? to_zero : one_expects;
        // Own block first (1 element), then the other rank's, plus a guard zone.
        constexpr int32_t kGuard = -7;
        std::vector<int32_t> send(1 + send_other), recv(1 + recv_other + 16, kGuard);
        for (size_t i = 0; i < send.size(); ++i) send[i] = Value(r, i);
        const std::vector<size_t> send_counts =
            r == 0 ? std::vector<size_t>{1, send_other} : std::vector<size_t>{send_other, 1};
        const std::vector<size_t> send_displs =
            r == 0 ? std::vector<size_t>{0, 1} : std::vector<size_t>{1, 0};
        const std::vector<size_t> recv_counts =
            r == 0 ? std::vector<size_t>{1, recv_other} : std::vector<size_t>{recv_other, 1};
        const std::vector<size_t> recv_displs =
            r == 0 ? std::vector<size_t>{0, 1} : std::vector<size_t>{1, 0};
        absl::Status status = comm.AllToAllV(send.data(), send_counts, send_displs, recv.data(),
                                             recv_counts, recv_displs, DataType::kInt32);
        for (size_t i = 1 + recv_other; i < recv.size(); ++i) {
          if (recv[i] != kGuard) return InternalError("the alltoallv wrote past its buffer");
        }
        if (status.ok() && recv_other == (r == 0 ? to_zero : to_one)) {
          for (size_t i = 0; i < recv_other; ++i) {
            // The other rank's elements 1.. are its block for this rank.
            CHORUS_RETURN_IF_ERROR(Expect(recv[1 + i] == Value(1 - r, 1 + i),
                                          absl::StrCat("alltoallv element ", i, " on rank ", r)));
          }
          CHORUS_RETURN_IF_ERROR(Expect(recv[0] == Value(r, 0), "own block"));
        }
        if (status.ok()) status = comm.Barrier();
        return status;
      },
      absl::Minutes(2), options);
  *elapsed = absl::FromChrono(std::chrono::steady_clock::now() - start);
  return statuses;
}

TEST_CASE("a rank whose first message is large works beside one whose first is small",
          "[piggyback]") {
  const size_t large = 4 * Limit() / sizeof(int32_t);
  for (auto [to_one, to_zero] : {std::pair<size_t, size_t>{large, 3}, {3, large}, {large, large}}) {
    absl::Duration elapsed;
    const std::vector<absl::Status> statuses = ExchangeV(to_one, to_zero, to_one, &elapsed);
    for (size_t rank = 0; rank < statuses.size(); ++rank) {
      INFO(to_one << " / " << to_zero << " elements, rank " << rank << ": "
                  << statuses[rank].ToString());
      CHECK(statuses[rank].ok());
    }
  }
}

TEST_CASE("a message length that disagrees with the receive is a MismatchError", "[piggyback]") {
  const size_t small = 3;
  const size_t large = 4 * Limit() / sizeof(int32_t);
  // (sent to rank 1, expected by rank 1): both small (the data rides in the header, and its
  // length is wrong), small sent where large is expected (the large receive is posted at once
  // and must not wait for a message that came inside the header), large sent where small is
  // expected (the deferred receive is posted on the transport and gets a longer message).
  for (auto [sent, expected] : {std::pair<size_t, size_t>{small, small + 1},
                                {small + 1, small},
                                {small, large},
                                {large, small}}) {
    absl::Duration elapsed;
    const std::vector<absl::Status> statuses = ExchangeV(sent, small, expected, &elapsed);
    INFO(sent << " elements sent, " << expected << " expected; took "
              << absl::FormatDuration(elapsed));
    CHECK(elapsed < absl::Seconds(10));  // the collective timeout is 30 s
    INFO("rank 1: " << statuses[1].ToString());
    CHECK(GetErrorKind(statuses[1]) == ErrorKind::kMismatch);
    CHECK(ErrorPeerRank(statuses[1]) == 0);
    CHECK((absl::StrContains(statuses[1].message(), "bytes") ||
           absl::StrContains(statuses[1].message(), "longer")));
    INFO("rank 0: " << statuses[0].ToString());
    CHECK(!statuses[0].ok());  // it learns of the failure, at the latest in the barrier
  }
}

TEST_CASE("8-byte allreduces whose headers disagree fail with MismatchError on both ranks",
          "[piggyback]") {
  // float32 x 2 against float64 x 1: the same 8 bytes, so only the header tells them apart,
  // and the data rides inside it.
  CommunicatorOptions options;
  options.timeout = absl::Seconds(30);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<absl::Status> statuses = RunOnThreadsAll(
      kTransport, 2,
      [](Communicator& comm) -> absl::Status {
        double buffer[1] = {1.0};
        const DataType type = comm.rank() == 0 ? DataType::kFloat32 : DataType::kFloat64;
        absl::Status status =
            comm.AllReduce(buffer, buffer, comm.rank() == 0 ? 2 : 1, type, ReduceOp::kSum);
        if (status.ok()) status = comm.Barrier();
        return status;
      },
      absl::Minutes(1), options);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].ToString());
    CHECK(GetErrorKind(statuses[rank]) == ErrorKind::kMismatch);
    CHECK(absl::StrContains(statuses[rank].message(), "called"));
    CHECK(absl::StrContains(statuses[rank].message(), "type"));
  }
}

}  // namespace
}  // namespace chorus::testing
