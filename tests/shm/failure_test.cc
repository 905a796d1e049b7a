// Cancel, deadlines, abort, mesh destruction and peers that leave, with ranks as threads.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "chorus/core/status.h"
#include "tests/shm/shm_test_util.h"

namespace chorus::shm_testing {
namespace {

using shm::SingleCopyMode;

constexpr size_t kLarge = 4 << 20;

SingleCopyMode AnyMode() {
  return GENERATE(SingleCopyMode::kAuto, SingleCopyMode::kCma, SingleCopyMode::kStaging);
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST_CASE("a cancelled receive completes kAborted and the message goes to the next receive") {
  const SingleCopyMode mode = AnyMode();
  INFO("single copy " << shm::SingleCopyModeName(mode));
  const auto statuses = RunMeshThreads(2, OptionsFor(mode), [&](Mesh& mesh) -> absl::Status {
    auto connection = mesh.GetConnection(1 - mesh.rank());
    SHM_OK(connection.status());
    Connection& peer = **connection;
    for (size_t size : {size_t{32}, kLarge}) {
      const std::vector<char> data = Pattern(size, 3);
      if (mesh.rank() == 0) {
        char go;
        SHM_OK(peer.Recv(2, &go, 1)->Wait(Generous()));
        SHM_OK(peer.Send(1, data.data(), size)->Wait(Generous()));
        continue;
      }
      std::vector<char> first(size, '#');
      std::vector<char> second(size);
      RequestPtr cancelled = peer.Recv(1, first.data(), size);
      cancelled->Cancel();
      SHM_EXPECT(cancelled->IsDone());
      const absl::Status status = cancelled->Wait(Generous());
      SHM_EXPECT(GetErrorKind(status) == ErrorKind::kAborted, status.ToString());
      cancelled->Cancel();  // no effect on a request that is done
      RequestPtr taken = peer.Recv(1, second.data(), size);
      SHM_OK(peer.Send(2, "g", 1)->Wait(Generous()));
      SHM_OK(taken->Wait(Generous()));
      SHM_OK(ExpectPattern(second.data(), size, 3));
      for (char c : first) SHM_EXPECT(c == '#', "the cancelled buffer was written");
    }
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

TEST_CASE("a send cancelled before it is received never arrives") {
  const SingleCopyMode mode = AnyMode();
  INFO("single copy " << shm::SingleCopyModeName(mode));
  // A hold far longer than the test: otherwise a sender preempted between Send and Cancel on a
  // busy host finds its message already pulled into the receiver's unexpected buffer.
  ShmOptions options = OptionsFor(mode);
  options.hold = absl::Seconds(30);
  const auto statuses = RunMeshThreads(2, options, [&](Mesh& mesh) -> absl::Status {
    auto connection = mesh.GetConnection(1 - mesh.rank());
    SHM_OK(connection.status());
    Connection& peer = **connection;
    const std::vector<char> withdrawn = Pattern(kLarge, 1);
    const std::vector<char> kept = Pattern(kLarge, 2);
    if (mesh.rank() == 0) {
      RequestPtr send = peer.Send(1, withdrawn.data(), kLarge);
      send->Cancel();
      const absl::Status status = send->Wait(Generous());
      SHM_EXPECT(GetErrorKind(status) == ErrorKind::kAborted, status.ToString());
      SHM_OK(peer.Send(2, nullptr, 0)->Wait(Generous()));  // tells the receiver to post
      SHM_OK(peer.Send(1, kept.data(), kLarge)->Wait(Generous()));
      return absl::OkStatus();
    }
    // Post only after the cancel, so nothing could have claimed the withdrawn message.
    SHM_OK(peer.Recv(2, nullptr, 0)->Wait(Generous()));
    std::vector<char> into(kLarge);
    RequestPtr recv = peer.Recv(1, into.data(), kLarge);
    SHM_OK(recv->Wait(Generous()));
    SHM_OK(ExpectPattern(into.data(), kLarge, 2));
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

TEST_CASE("cancel racing a transfer: once Cancel returns the buffer is the sender's again") {
  const SingleCopyMode mode = AnyMode();
  INFO("single copy " << shm::SingleCopyModeName(mode));
  constexpr int kRounds = 12;
  const auto statuses = RunMeshThreads(2, OptionsFor(mode), [&](Mesh& mesh) -> absl::Status {
    auto connection = mesh.GetConnection(1 - mesh.rank());
    SHM_OK(connection.status());
    Connection& peer = **connection;
    for (int round = 0; round < kRounds; ++round) {
      if (mesh.rank() == 0) {
        std::vector<char> buffer = Pattern(kLarge, round);
        RequestPtr send = peer.Send(1, buffer.data(), kLarge);
        std::this_thread::sleep_for(std::chrono::microseconds(200 * (round % 4)));
        send->Cancel();
        SHM_EXPECT(send->IsDone());
        // Scribble at once: a receiver that got the message must not see this.
        std::memset(buffer.data(), 0x5a, kLarge);
        const absl::Status status = send->status();
        SHM_EXPECT(status.ok() || GetErrorKind(status) == ErrorKind::kAborted, status.ToString());
        // A marker follows, so the receiver always has something to take.
        SHM_OK(peer.Send(1, "m", 1)->Wait(Generous()));
        char done;
        SHM_OK(peer.Recv(2, &done, 1)->Wait(Generous()));
        continue;
      }
      std::vector<char> into(kLarge);
      RequestPtr recv = peer.Recv(1, into.data(), kLarge);
      const absl::Status status = recv->Wait(Generous());
      if (status.ok() && recv->bytes() == kLarge) {
        SHM_OK(ExpectPattern(into.data(), kLarge, round));
        char marker;
        SHM_OK(peer.Recv(1, &marker, 1)->Wait(Generous()));
      } else if (status.ok()) {
        SHM_EXPECT(recv->bytes() == 1 && into[0] == 'm', "the withdrawn message was replaced");
      } else {
        // Withdrawn mid-stream (staging): the receive says so; the marker follows.
        SHM_EXPECT(GetErrorKind(status) == ErrorKind::kAborted, status.ToString());
        char marker;
        SHM_OK(peer.Recv(1, &marker, 1)->Wait(Generous()));
      }
      SHM_OK(peer.Send(2, "d", 1)->Wait(Generous()));
    }
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

TEST_CASE("a wait past its deadline fails kDeadlineExceeded naming the peer; the request stays") {
  const auto statuses = RunMeshThreads(2, ShmOptions{}, [&](Mesh& mesh) -> absl::Status {
    auto connection = mesh.GetConnection(1 - mesh.rank());
    SHM_OK(connection.status());
    Connection& peer = **connection;
    if (mesh.rank() == 0) {
      char go;
      SHM_OK(peer.Recv(2, &go, 1)->Wait(Generous()));
      SHM_OK(peer.Send(1, "late", 4)->Wait(Generous()));
      return absl::OkStatus();
    }
    char into[4];
    RequestPtr recv = peer.Recv(1, into, sizeof(into));
    const auto start = std::chrono::steady_clock::now();
    const absl::Status status = recv->Wait(Deadline::After(absl::Milliseconds(50)));
    const double waited = SecondsSince(start);
    SHM_EXPECT(GetErrorKind(status) == ErrorKind::kDeadlineExceeded, status.ToString());
    SHM_EXPECT(ErrorPeerRank(status) == 0);
    SHM_EXPECT(absl::StrContains(status.message(), "rank 0"), status.message());
    SHM_EXPECT(waited >= 0.045 && waited < 5, waited);
    SHM_EXPECT(!recv->IsDone());
    SHM_OK(peer.Send(2, "g", 1)->Wait(Generous()));
    SHM_OK(recv->Wait(Generous()));
    SHM_EXPECT(std::memcmp(into, "late", 4) == 0);
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

TEST_CASE("Abort fails local waiters promptly and the peers see the rank go") {
  const auto statuses = RunMeshThreads(3, ShmOptions{}, [&](Mesh& mesh) -> absl::Status {
    if (mesh.rank() == 0) {
      auto to1 = mesh.GetConnection(1);
      SHM_OK(to1.status());
      char byte;
      // Make sure rank 1 is attached before aborting: it says so.
      SHM_OK((*to1)->Recv(5, &byte, 1)->Wait(Generous()));
      RequestPtr pending = (*to1)->Recv(6, &byte, 1);
      std::thread aborter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        mesh.Abort("the test aborts rank 0");
      });
      const auto start = std::chrono::steady_clock::now();
      const absl::Status status = pending->Wait(Generous());
      const double waited = SecondsSince(start);
      aborter.join();
      SHM_EXPECT(GetErrorKind(status) == ErrorKind::kAborted, status.ToString());
      SHM_EXPECT(absl::StrContains(status.message(), "the test aborts rank 0"), status.message());
      SHM_EXPECT(waited < 1.0, waited);
      // Later requests fail at once, also to peers never connected before.
      auto to2 = mesh.GetConnection(2);
      SHM_OK(to2.status());
      RequestPtr later = (*to2)->Send(1, "x", 1);
      SHM_EXPECT(later->IsDone() && GetErrorKind(later->status()) == ErrorKind::kAborted);
      return absl::OkStatus();
    }
    auto to0 = mesh.GetConnection(0);
    SHM_OK(to0.status());
    char byte = 0;
    RequestPtr waiting = (*to0)->Recv(7, &byte, 1);
    if (mesh.rank() == 1) SHM_OK((*to0)->Send(5, "a", 1)->Wait(Generous()));
    const auto start = std::chrono::steady_clock::now();
    const absl::Status status = waiting->Wait(Generous());
    SHM_EXPECT(GetErrorKind(status) == ErrorKind::kPeerUnavailable, status.ToString());
    SHM_EXPECT(ErrorPeerRank(status) == 0, status.ToString());
    SHM_EXPECT(SecondsSince(start) < 2.0);
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

TEST_CASE("destroying a mesh completes its pending requests; they stay usable afterwards") {
  RequestPtr orphan_recv;
  RequestPtr orphan_send;
  std::atomic<bool> posted{false};
  std::vector<char> big = Pattern(kLarge, 9);
  char byte;
  const auto statuses = RunMeshThreads(2, ShmOptions{}, [&](Mesh& mesh) -> absl::Status {
    auto connection = mesh.GetConnection(1 - mesh.rank());
    SHM_OK(connection.status());
    if (mesh.rank() == 0) {
      orphan_recv = (*connection)->Recv(1, &byte, 1);
      orphan_send = (*connection)->Send(2, big.data(), big.size());  // never received
      SHM_EXPECT(!orphan_recv->IsDone() && !orphan_send->IsDone());
      posted = true;
      return absl::OkStatus();  // the mesh is destroyed as the body returns
    }
    // Rank 1 stays until rank 0's mesh is gone, so rank 0's requests end by its own
    // destruction rather than by rank 1 leaving.
    const Deadline deadline = Generous();
    while (!(posted && orphan_recv->IsDone()) && !deadline.Expired()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
  REQUIRE(orphan_recv->IsDone());
  REQUIRE(orphan_send->IsDone());
  CHECK(GetErrorKind(orphan_recv->Wait(Deadline::Infinite())) == ErrorKind::kAborted);
  CHECK(GetErrorKind(orphan_send->status()) == ErrorKind::kAborted);
  orphan_recv->Cancel();  // no effect, no crash
  orphan_recv.reset();
  orphan_send.reset();
  CHECK(InboxMappings().empty());
}

TEST_CASE("messages sent before a peer closed its mesh are still received; then it is gone") {
  std::atomic<bool> sender_closed{false};
  const auto statuses = RunMeshThreads(2, ShmOptions{}, [&](Mesh& mesh) -> absl::Status {
    if (mesh.rank() == 0) {
      {
        auto connection = mesh.GetConnection(1);
        SHM_OK(connection.status());
        for (int i = 0; i < 3; ++i) {
          SHM_OK((*connection)->Send(1, &i, sizeof(i))->Wait(Generous()));
        }
      }
      mesh.Abort("rank 0 leaves");
      sender_closed = true;
      return absl::OkStatus();
    }
    const Deadline deadline = Generous();
    while (!sender_closed && !deadline.Expired()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    auto connection = mesh.GetConnection(0);
    SHM_OK(connection.status());
    for (int i = 0; i < 3; ++i) {
      int value = -1;
      SHM_OK((*connection)->Recv(1, &value, sizeof(value))->Wait(Generous()));
      SHM_EXPECT(value == i);
    }
    int value;
    const absl::Status status = (*connection)->Recv(1, &value, sizeof(value))->Wait(Generous());
    SHM_EXPECT(GetErrorKind(status) == ErrorKind::kPeerUnavailable, status.ToString());
    SHM_EXPECT(ErrorPeerRank(status) == 0);
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

TEST_CASE("invalid peers and buffers are refused with kInvalidArgument") {
  const auto statuses = RunMeshThreads(2, ShmOptions{}, [&](Mesh& mesh) -> absl::Status {
    SHM_EXPECT(GetErrorKind(mesh.GetConnection(mesh.rank()).status()) ==
               ErrorKind::kInvalidArgument);
    SHM_EXPECT(GetErrorKind(mesh.GetConnection(2).status()) == ErrorKind::kInvalidArgument);
    SHM_EXPECT(GetErrorKind(mesh.GetConnection(-1).status()) == ErrorKind::kInvalidArgument);
    auto connection = mesh.GetConnection(1 - mesh.rank());
    SHM_OK(connection.status());
    SHM_EXPECT((*connection)->peer() == 1 - mesh.rank());
    SHM_EXPECT(*mesh.GetConnection(1 - mesh.rank()) == *connection, "the same object each time");
    RequestPtr cuda = (*connection)->Send(1, ConstMemoryRef{"x", 1, MemoryType::kCuda, 0});
    SHM_EXPECT(GetErrorKind(cuda->status()) == ErrorKind::kInvalidArgument);
    RequestPtr null = (*connection)->Recv(1, nullptr, 8);
    SHM_EXPECT(GetErrorKind(null->status()) == ErrorKind::kInvalidArgument);
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

}  // namespace
}  // namespace chorus::shm_testing
