// Point-to-point: every ordered pair exchanges tagged messages (FIFO per tag, tags kept apart),
// receive from any of a set of ranks reports the sender, a wrong length is a MismatchError,
// and a receive nobody answers times out naming the peer.
#include <catch2/catch.hpp>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "chorus/core/status.h"
#include "tests/collectives/test_transport.h"

namespace chorus::testing {
namespace {

const TransportKind kTransport = kTestTransport;

TEST_CASE("every pair exchanges tagged messages in order", "[p2p]") {
  const absl::Status status = RunOnThreads(
      kTransport, 4,
      [](Communicator& comm) -> absl::Status {
        const int p = comm.size();
        const int r = comm.rank();
        std::vector<WorkPtr> works;
        std::vector<std::vector<int64_t>> out(p * 3), in(p * 3);
        for (int peer = 0; peer < p; ++peer) {
          if (peer == r) continue;
          for (int k = 0; k < 3; ++k) {  // three messages on tag 5 (FIFO), one each on 9
            auto& message = out[peer * 3 + k];
            message.assign(10 + k, r * 1000 + peer * 10 + k);
            works.push_back(comm.SendAsync(message.data(), message.size(), DataType::kInt64, peer,
                                           k < 2 ? 5 : 9));
          }
        }
        for (int peer = 0; peer < p; ++peer) {
          if (peer == r) continue;
          // Receive tag 9 first: tags are independent streams.
          auto& late = in[peer * 3 + 2];
          late.resize(12);
          CHORUS_RETURN_IF_ERROR(comm.Recv(late.data(), 12, DataType::kInt64, peer, 9));
          for (int k = 0; k < 2; ++k) {
            auto& message = in[peer * 3 + k];
            message.resize(10 + k);
            CHORUS_RETURN_IF_ERROR(
                comm.Recv(message.data(), message.size(), DataType::kInt64, peer, 5));
          }
          for (int k = 0; k < 3; ++k) {
            for (int64_t v : in[peer * 3 + k]) {
              CHORUS_RETURN_IF_ERROR(Expect(v == peer * 1000 + r * 10 + k, "payload"));
            }
          }
        }
        for (WorkPtr& work : works) CHORUS_RETURN_IF_ERROR(work->Wait());
        return absl::OkStatus();
      },
      absl::Minutes(1));
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("receive from any of a set of ranks names the sender", "[p2p]") {
  const absl::Status status = RunOnThreads(
      kTransport, 4,
      [](Communicator& comm) -> absl::Status {
        int32_t value = comm.rank() * 11;
        if (comm.rank() != 0) {
          CHORUS_RETURN_IF_ERROR(comm.Send(&value, 1, DataType::kInt32, 0, 3));
          return comm.Barrier();  // stay connected until rank 0 has received everything
        }
        std::set<int> seen;
        for (int i = 0; i < 3; ++i) {
          int32_t got = -1;
          CHORUS_ASSIGN_OR_RETURN(const int sender,
                                  comm.RecvFromAny(&got, 1, DataType::kInt32, {1, 2, 3}, 3));
          CHORUS_RETURN_IF_ERROR(Expect(got == sender * 11, "payload matches the sender"));
          seen.insert(sender);
        }
        CHORUS_RETURN_IF_ERROR(Expect(seen == std::set<int>{1, 2, 3}, "each sender once"));
        return comm.Barrier();
      },
      absl::Minutes(1));
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("a wrong length is a mismatch; an unanswered receive times out naming the peer",
          "[p2p]") {
  const absl::Status status = RunOnThreads(
      kTransport, 2,
      [](Communicator& comm) -> absl::Status {
        std::vector<float> data(8, 1.0f);
        if (comm.rank() == 1) {
          CHORUS_RETURN_IF_ERROR(comm.Send(data.data(), 8, DataType::kFloat32, 0, 1));
          CHORUS_RETURN_IF_ERROR(comm.Send(data.data(), 2, DataType::kFloat32, 0, 2));
          // Wait for rank 0 to finish before going away.
          return comm.Recv(data.data(), 1, DataType::kFloat32, 0, 4);
        }
        const absl::Status longer = comm.Recv(data.data(), 4, DataType::kFloat32, 1, 1);
        CHORUS_RETURN_IF_ERROR(
            Expect(GetErrorKind(longer) == ErrorKind::kMismatch, "longer: " + longer.ToString()));
        const absl::Status shorter = comm.Recv(data.data(), 4, DataType::kFloat32, 1, 2);
        CHORUS_RETURN_IF_ERROR(Expect(GetErrorKind(shorter) == ErrorKind::kMismatch &&
                                          absl::StrContains(shorter.message(), "8 bytes"),
                                      "shorter: " + shorter.ToString()));
        CollectiveOptions quick;
        quick.timeout = absl::Milliseconds(100);
        const absl::Status silent = comm.Recv(data.data(), 1, DataType::kFloat32, 1, 3, quick);
        CHORUS_RETURN_IF_ERROR(Expect(GetErrorKind(silent) == ErrorKind::kDeadlineExceeded &&
                                          absl::StrContains(silent.message(), "rank 1"),
                                      "silent: " + silent.ToString()));
        return comm.Send(data.data(), 1, DataType::kFloat32, 1, 4);
      },
      absl::Minutes(1));
  INFO(status.ToString());
  CHECK(status.ok());
}

}  // namespace
}  // namespace chorus::testing
