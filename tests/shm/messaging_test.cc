// Message semantics of the shm transport with ranks as threads, in every single-copy mode:
// memcpy (auto within a process), process_vm_readv on itself (cma) and the staging area.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "chorus/core/status.h"
#include "tests/shm/shm_test_util.h"
#include "tests/transport/recording_sink.h"

namespace chorus::shm_testing {
namespace {

using shm::SingleCopyMode;

constexpr size_t kLarge = 1 << 20;  // above the eager limit: the single-copy path

SingleCopyMode AnyMode() {
  return GENERATE(SingleCopyMode::kAuto, SingleCopyMode::kCma, SingleCopyMode::kStaging);
}

TEST_CASE("messages with one tag arrive in order, small and large mixed") {
  const SingleCopyMode mode = AnyMode();
  INFO("single copy " << shm::SingleCopyModeName(mode));
  // Sizes cycle through zero, eager and large so the two paths interleave on one tag.
  const std::vector<size_t> sizes = {0, 8, 4096, 40000, kLarge, 3 * kLarge + 5, 1};
  constexpr int kMessages = 70;
  const auto statuses = RunMeshThreads(2, OptionsFor(mode), [&](Mesh& mesh) -> absl::Status {
    auto connection = mesh.GetConnection(1 - mesh.rank());
    SHM_OK(connection.status());
    std::vector<RequestPtr> requests;
    std::vector<std::vector<char>> buffers;
    for (int i = 0; i < kMessages; ++i) {
      const size_t size = sizes[i % sizes.size()];
      if (mesh.rank() == 0) {
        buffers.push_back(Pattern(size, i));
        requests.push_back((*connection)->Send(7, buffers.back().data(), size));
      } else {
        buffers.emplace_back(size + 16);
        requests.push_back((*connection)->Recv(7, buffers.back().data(), size + 16));
      }
    }
    SHM_OK(WaitAll(requests, Generous()));
    if (mesh.rank() == 1) {
      for (int i = 0; i < kMessages; ++i) {
        const size_t size = sizes[i % sizes.size()];
        SHM_EXPECT(requests[i]->bytes() == size, "message ", i);
        SHM_OK(ExpectPattern(buffers[i].data(), size, i));
      }
    }
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

TEST_CASE("many tags in flight match by tag, receives posted in reverse order") {
  const SingleCopyMode mode = AnyMode();
  INFO("single copy " << shm::SingleCopyModeName(mode));
  constexpr int kTags = 96;
  const auto statuses = RunMeshThreads(2, OptionsFor(mode), [&](Mesh& mesh) -> absl::Status {
    auto connection = mesh.GetConnection(1 - mesh.rank());
    SHM_OK(connection.status());
    std::vector<RequestPtr> requests(kTags);
    std::vector<std::vector<char>> buffers(kTags);
    auto size_of = [](int tag) { return tag % 3 == 0 ? kLarge + tag : 16 * tag + 1; };
    for (int k = 0; k < kTags; ++k) {
      const int tag = mesh.rank() == 0 ? k : kTags - 1 - k;
      if (mesh.rank() == 0) {
        buffers[tag] = Pattern(size_of(tag), tag);
        requests[tag] = (*connection)->Send(1000 + tag, buffers[tag].data(), size_of(tag));
      } else {
        buffers[tag].resize(size_of(tag));
        requests[tag] = (*connection)->Recv(1000 + tag, buffers[tag].data(), size_of(tag));
      }
    }
    SHM_OK(WaitAll(requests, Generous()));
    if (mesh.rank() == 1) {
      for (int tag = 0; tag < kTags; ++tag) {
        SHM_OK(ExpectPattern(buffers[tag].data(), size_of(tag), tag));
      }
    }
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

TEST_CASE("zero-length and 64 MiB messages, receive posted before and after the send") {
  const SingleCopyMode mode = AnyMode();
  INFO("single copy " << shm::SingleCopyModeName(mode));
  constexpr size_t kHuge = kHugeMessage;
  const std::vector<char> huge = Pattern(kHuge, 64);
  const auto statuses = RunMeshThreads(2, OptionsFor(mode), [&](Mesh& mesh) -> absl::Status {
    auto connection = mesh.GetConnection(1 - mesh.rank());
    SHM_OK(connection.status());
    Connection& peer = **connection;
    if (mesh.rank() == 0) {
      // Round 1: the receiver posts first (it signals readiness with a zero-length message).
      char ready = 0;
      SHM_OK(peer.Recv(1, &ready, 0)->Wait(Generous()));
      SHM_OK(peer.Send(2, nullptr, 0)->Wait(Generous()));
      SHM_OK(peer.Send(3, huge.data(), huge.size())->Wait(Generous()));
      // Round 2: the sends go first; the receiver posts after it hears they were sent.
      RequestPtr empty = peer.Send(4, nullptr, 0);
      RequestPtr big = peer.Send(5, huge.data(), huge.size());
      SHM_OK(empty->Wait(Generous()));
      SHM_OK(peer.Send(6, &ready, 1)->Wait(Generous()));
      SHM_OK(big->Wait(Generous()));
      return absl::OkStatus();
    }
    std::vector<char> into(kHuge);
    char scratch = 'x';
    RequestPtr empty = peer.Recv(2, &scratch, 1);
    RequestPtr big = peer.Recv(3, into.data(), into.size());
    SHM_OK(peer.Send(1, nullptr, 0)->Wait(Generous()));
    SHM_OK(empty->Wait(Generous()));
    SHM_EXPECT(empty->bytes() == 0 && scratch == 'x');
    SHM_OK(big->Wait(Generous()));
    SHM_EXPECT(big->bytes() == kHuge);
    SHM_OK(ExpectPattern(into.data(), kHuge, 64));

    std::fill(into.begin(), into.end(), 0);
    char sent = 0;
    SHM_OK(peer.Recv(6, &sent, 1)->Wait(Generous()));
    RequestPtr late_empty = peer.Recv(4, nullptr, 0);
    RequestPtr late_big = peer.Recv(5, into.data(), into.size());
    SHM_OK(late_empty->Wait(Generous()));
    SHM_OK(late_big->Wait(Generous()));
    SHM_EXPECT(late_empty->bytes() == 0 && late_big->bytes() == kHuge);
    SHM_OK(ExpectPattern(into.data(), kHuge, 64));
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

TEST_CASE("a receive with a sink is handed eager and staged messages straight from the inbox") {
  // Eager records and staging chunks go to the sink (the copy into a buffer is what the sink
  // saves); a cross-memory read for a posted receive goes to the sink in pieces read into a
  // buffer that stays in cache. Receives posted before the message and after it.
  const SingleCopyMode mode = AnyMode();
  INFO("single copy " << shm::SingleCopyModeName(mode));
  const std::vector<size_t> sizes = {8, 40000, 3 * kLarge + 8};
  const auto statuses = RunMeshThreads(2, OptionsFor(mode), [&](Mesh& mesh) -> absl::Status {
    auto connection = mesh.GetConnection(1 - mesh.rank());
    SHM_OK(connection.status());
    Connection& peer = **connection;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::vector<char> data = Pattern(sizes[i], i);
      const Tag early = 10 + 2 * i;
      const Tag late = 11 + 2 * i;
      if (mesh.rank() == 0) {
        char posted = 0;
        SHM_OK(peer.Recv(1, &posted, 1)->Wait(Generous()));
        SHM_OK(WaitAll(
            {peer.Send(early, data.data(), data.size()), peer.Send(late, data.data(), data.size())},
            Generous()));
        continue;
      }
      for (const Tag tag : {early, late}) {
        std::vector<char> buffer(sizes[i], 'E');
        testing::RecordingSink sink(sizes[i]);
        RequestPtr recv = peer.RecvWithSink(tag, MemoryRef{buffer.data(), buffer.size()}, &sink);
        if (tag == early) SHM_OK(peer.Send(1, "p", 1)->Wait(Generous()));
        SHM_OK(recv->Wait(Generous()));
        SHM_EXPECT(recv->bytes() == sizes[i]);
        const bool eager = sizes[i] <= OptionsFor(mode).eager_bytes;
        const bool staged = mode == SingleCopyMode::kStaging;
        if (eager || staged) {
          SHM_EXPECT(sink.pieces() > 0, "message ", i, " tag ", tag);
          SHM_OK(sink.Check(sizes[i]));
          SHM_OK(ExpectPattern(reinterpret_cast<const char*>(sink.data().data()), sizes[i], i));
          SHM_EXPECT(
              std::count(buffer.begin(), buffer.end(), 'E') == static_cast<long>(buffer.size()),
              "the buffer was written, message ", i);
        } else if (mode == SingleCopyMode::kCma && tag == early) {
          const size_t pieces =
              (sizes[i] + shm::kCrossMemoryPieceBytes - 1) / shm::kCrossMemoryPieceBytes;
          SHM_EXPECT(sink.pieces() == static_cast<int>(pieces), "message ", i, ": ",
                     sink.pieces(), " pieces");
          SHM_OK(sink.Check(sizes[i]));
          SHM_OK(ExpectPattern(reinterpret_cast<const char*>(sink.data().data()), sizes[i], i));
          SHM_EXPECT(
              std::count(buffer.begin(), buffer.end(), 'E') == static_cast<long>(buffer.size()),
              "the buffer was written, message ", i);
        } else {
          // auto (this VM's measurement picks cross-memory reads or staging), or a late message
          // that was pulled into a buffer of the transport's before its receive was posted and
          // is handed over from there.
          SHM_OK(sink.Check(sink.pieces() > 0 ? sizes[i] : 0));
          SHM_OK(ExpectPattern(
              sink.pieces() > 0 ? reinterpret_cast<const char*>(sink.data().data()) : buffer.data(),
              sizes[i], i));
        }
      }
    }
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

TEST_CASE("a large send completes before its receive is posted; the receive gets it later") {
  const SingleCopyMode mode = AnyMode();
  INFO("single copy " << shm::SingleCopyModeName(mode));
  const auto statuses = RunMeshThreads(2, OptionsFor(mode), [&](Mesh& mesh) -> absl::Status {
    auto connection = mesh.GetConnection(1 - mesh.rank());
    SHM_OK(connection.status());
    Connection& peer = **connection;
    const std::vector<char> data = Pattern(8 * kLarge, 8);
    if (mesh.rank() == 0) {
      // No receive is posted until "go": the send must complete on its own (after the hold
      // time the receiver pulls the message into a buffer of its own).
      SHM_OK(peer.Send(1, data.data(), data.size())->Wait(Generous()));
      SHM_OK(peer.Send(2, "go", 2)->Wait(Generous()));
      return absl::OkStatus();
    }
    char go[2];
    SHM_OK(peer.Recv(2, go, 2)->Wait(Generous()));
    std::vector<char> into(data.size());
    RequestPtr recv = peer.Recv(1, into.data(), into.size());
    SHM_OK(recv->Wait(Generous()));
    SHM_EXPECT(recv->bytes() == data.size());
    SHM_OK(ExpectPattern(into.data(), into.size(), 8));
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

TEST_CASE(
    "a sender's held messages wait their turn: a receiver working through them in order "
    "gets each one by the single copy") {
  // Six 1 MiB messages announced at once; the receiver posts one receive every 60 ms, so it
  // reaches the last one after the 250 ms hold of a single message but long before the
  // queued hold of the sixth (6 x 250 ms). A pulled message would complete its send before
  // its receive was posted.
  ShmOptions options = OptionsFor(SingleCopyMode::kAuto);
  options.hold = absl::Milliseconds(250);
  constexpr int kMessages = 6;
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> sent(kMessages), posted(kMessages);
  const auto statuses = RunMeshThreads(2, options, [&](Mesh& mesh) -> absl::Status {
    auto connection = mesh.GetConnection(1 - mesh.rank());
    SHM_OK(connection.status());
    Connection& peer = **connection;
    std::vector<std::vector<char>> buffers;
    std::vector<RequestPtr> requests;
    for (int i = 0; i < kMessages; ++i) {
      if (mesh.rank() == 0) {
        buffers.push_back(Pattern(kLarge, i));
        requests.push_back(peer.Send(i, buffers.back().data(), kLarge));
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(60));
        buffers.emplace_back(kLarge);
        posted[i] = Clock::now();
        requests.push_back(peer.Recv(i, buffers.back().data(), kLarge));
      }
    }
    for (int i = 0; i < kMessages; ++i) {
      SHM_OK(requests[i]->Wait(Generous()));
      if (mesh.rank() == 0) sent[i] = Clock::now();
      if (mesh.rank() == 1) SHM_OK(ExpectPattern(buffers[i].data(), kLarge, i));
    }
    char end = 'e';  // both sides' times are recorded before either compares them
    if (mesh.rank() == 0) return peer.Send(kMessages, &end, 1)->Wait(Generous());
    return peer.Recv(kMessages, &end, 1)->Wait(Generous());
  });
  REQUIRE(Failures(statuses) == "");
  for (int i = 0; i < kMessages; ++i) {
    INFO("message " << i);
    CHECK(sent[i] >= posted[i]);
  }
}

TEST_CASE("receives posted while unmatched large messages are being pulled") {
  const SingleCopyMode mode = AnyMode();
  INFO("single copy " << shm::SingleCopyModeName(mode));
  ShmOptions options = OptionsFor(mode);
  options.hold = absl::ZeroDuration();  // pull at once, so receives race the pulls
  constexpr int kRounds = 8;
  const auto statuses = RunMeshThreads(2, options, [&](Mesh& mesh) -> absl::Status {
    auto connection = mesh.GetConnection(1 - mesh.rank());
    SHM_OK(connection.status());
    Connection& peer = **connection;
    for (int round = 0; round < kRounds; ++round) {
      const size_t size = 4 * kLarge + round;
      if (mesh.rank() == 0) {
        const std::vector<char> a = Pattern(size, 2 * round);
        const std::vector<char> b = Pattern(size, 2 * round + 1);
        SHM_OK(WaitAll({peer.Send(round, a.data(), size), peer.Send(round, b.data(), size)},
                       Generous()));
        char done;
        SHM_OK(peer.Recv(1000, &done, 1)->Wait(Generous()));
        continue;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500 * (round % 4)));
      std::vector<char> first(size), second(size - 1);
      RequestPtr a = peer.Recv(round, first.data(), first.size());
      RequestPtr b = peer.Recv(round, second.data(), second.size());  // one byte short
      SHM_OK(a->Wait(Generous()));
      SHM_OK(ExpectPattern(first.data(), size, 2 * round));
      const absl::Status status = b->Wait(Generous());
      SHM_EXPECT(GetErrorKind(status) == ErrorKind::kInvalidArgument, status.ToString());
      SHM_OK(peer.Send(1000, "d", 1)->Wait(Generous()));
    }
    // The discarded message may still be streaming when its receive has failed; rank 1 keeps
    // its mesh until rank 0's sends are done, since destroying it fails a send still in flight.
    char end = 'e';
    if (mesh.rank() == 0) return peer.Send(1001, &end, 1)->Wait(Generous());
    return peer.Recv(1001, &end, 1)->Wait(Generous());
  });
  REQUIRE(Failures(statuses) == "");
}

TEST_CASE("a sender far ahead of its receiver never has every rendezvous slot idle in a hold") {
  // A pair has 64 rendezvous slots and a held message keeps its slot. With a one-minute hold,
  // rank 0 posts 100 large sends nobody receives yet, then a small and a large message whose
  // receives are posted: both must arrive long before any hold is over, so the receiver may
  // hold only some of the unmatched messages and must pull the rest at once. The 100 are then
  // received in order, whole, however each was kept.
  const SingleCopyMode mode = AnyMode();
  INFO("single copy " << shm::SingleCopyModeName(mode));
  ShmOptions options = OptionsFor(mode);
  options.hold = absl::Minutes(1);
  constexpr int kUnmatched = 100;
  constexpr size_t kBytes = 64 << 10;  // above the eager limit
  constexpr Tag kSmall = kUnmatched;
  constexpr Tag kLargeTag = kUnmatched + 1;
  const auto statuses = RunMeshThreads(2, options, [&](Mesh& mesh) -> absl::Status {
    auto connection = mesh.GetConnection(1 - mesh.rank());
    SHM_OK(connection.status());
    Connection& peer = **connection;
    const Deadline prompt = Deadline::After(absl::Seconds(10));  // far below the hold
    if (mesh.rank() == 0) {
      std::vector<std::vector<char>> buffers;
      std::vector<RequestPtr> sends;
      for (int i = 0; i <= kUnmatched; ++i) buffers.push_back(Pattern(kBytes, i));
      for (Tag tag = 0; tag < kUnmatched; ++tag) {
        sends.push_back(peer.Send(tag, buffers[tag].data(), kBytes));
      }
      SHM_OK(WaitAll({peer.Send(kSmall, "s", 1), peer.Send(kLargeTag, buffers[kUnmatched].data(),
                                                            kBytes)},
                     prompt));
      return WaitAll(sends, Generous());
    }
    char small = 0;
    std::vector<char> large(kBytes);
    SHM_OK(WaitAll({peer.Recv(kSmall, &small, 1), peer.Recv(kLargeTag, large.data(), kBytes)},
                   prompt));
    SHM_EXPECT(small == 's');
    SHM_OK(ExpectPattern(large.data(), kBytes, kUnmatched));
    std::vector<char> into(kBytes);
    for (Tag tag = 0; tag < kUnmatched; ++tag) {
      SHM_OK(peer.Recv(tag, into.data(), kBytes)->Wait(Generous()));
      SHM_OK(ExpectPattern(into.data(), kBytes, tag));
    }
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

TEST_CASE("a message longer than the receive buffer fails the receive and writes nothing past it") {
  const SingleCopyMode mode = AnyMode();
  INFO("single copy " << shm::SingleCopyModeName(mode));
  const auto statuses = RunMeshThreads(2, OptionsFor(mode), [&](Mesh& mesh) -> absl::Status {
    auto connection = mesh.GetConnection(1 - mesh.rank());
    SHM_OK(connection.status());
    Connection& peer = **connection;
    for (size_t size : {size_t{100}, kLarge}) {
      const std::vector<char> data = Pattern(size, 5);
      const std::vector<char> next = Pattern(size / 2, 6);
      if (mesh.rank() == 0) {
        // Before and after the receive is posted (the ready message separates the two).
        RequestPtr early = peer.Send(9, data.data(), size);
        char ready;
        SHM_OK(peer.Recv(10, &ready, 1)->Wait(Generous()));
        RequestPtr late = peer.Send(9, data.data(), size);
        RequestPtr fits = peer.Send(9, next.data(), next.size());
        // The sender's side of a discarded message completes normally.
        SHM_OK(WaitAll({early, late, fits}, Generous()));
        continue;
      }
      // The buffer is followed by guard bytes that must stay untouched.
      const size_t capacity = size - 1;
      std::vector<char> buffer(capacity + 64, '#');
      RequestPtr first = peer.Recv(9, buffer.data(), capacity);
      absl::Status status = first->Wait(Generous());
      SHM_EXPECT(GetErrorKind(status) == ErrorKind::kInvalidArgument, status.ToString());
      RequestPtr second = peer.Recv(9, buffer.data(), capacity);
      SHM_OK(peer.Send(10, "r", 1)->Wait(Generous()));
      status = second->Wait(Generous());
      SHM_EXPECT(GetErrorKind(status) == ErrorKind::kInvalidArgument, status.ToString());
      for (size_t i = capacity; i < buffer.size(); ++i) {
        SHM_EXPECT(buffer[i] == '#', "guard byte ", i);
      }
      // The discarded messages are gone; the next one arrives intact.
      RequestPtr third = peer.Recv(9, buffer.data(), capacity);
      SHM_OK(third->Wait(Generous()));
      SHM_EXPECT(third->bytes() == next.size());
      SHM_OK(ExpectPattern(buffer.data(), next.size(), 6));
    }
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

TEST_CASE("RecvFromAny takes exactly one message and names its sender") {
  const SingleCopyMode mode = AnyMode();
  INFO("single copy " << shm::SingleCopyModeName(mode));
  const auto statuses = RunMeshThreads(4, OptionsFor(mode), [&](Mesh& mesh) -> absl::Status {
    if (mesh.rank() != 0) {
      auto connection = mesh.GetConnection(0);
      SHM_OK(connection.status());
      // Ranks 1 and 2 send two messages each on tag 3 (one small, one large); rank 3 sends on
      // another tag, which the any-receives must not take.
      const Tag tag = mesh.rank() == 3 ? 4 : 3;
      const std::vector<char> small = Pattern(64, mesh.rank());
      const std::vector<char> large = Pattern(kLarge, mesh.rank());
      SHM_OK(WaitAll({(*connection)->Send(tag, small.data(), small.size()),
                      (*connection)->Send(tag, large.data(), large.size())},
                     Generous()));
      return absl::OkStatus();
    }
    const std::vector<int> senders = {1, 2, 3};
    std::vector<std::vector<char>> buffers(4, std::vector<char>(kLarge));
    std::vector<RequestPtr> any;
    for (int i = 0; i < 4; ++i) {
      any.push_back(mesh.RecvFromAny(senders, 3, MemoryRef{buffers[i].data(), kLarge}));
    }
    SHM_OK(WaitAll(any, Generous()));
    int small_from[3] = {0, 0, 0};
    int large_from[3] = {0, 0, 0};
    for (int i = 0; i < 4; ++i) {
      const int from = any[i]->peer();
      SHM_EXPECT(from == 1 || from == 2, "got a message from ", from);
      const size_t bytes = any[i]->bytes();
      SHM_EXPECT(bytes == 64 || bytes == kLarge, bytes);
      SHM_OK(ExpectPattern(buffers[i].data(), bytes, from));
      ++(bytes == 64 ? small_from : large_from)[from];
    }
    SHM_EXPECT(small_from[1] == 1 && small_from[2] == 1 && large_from[1] == 1 &&
               large_from[2] == 1);
    // Rank 3's messages are still there for a receive of their own tag.
    auto from3 = mesh.GetConnection(3);
    SHM_OK(from3.status());
    RequestPtr a = (*from3)->Recv(4, buffers[0].data(), kLarge);
    RequestPtr b = (*from3)->Recv(4, buffers[1].data(), kLarge);
    SHM_OK(WaitAll({a, b}, Generous()));
    SHM_EXPECT(a->bytes() == 64 && b->bytes() == kLarge);
    // Invalid peer sets fail at once.
    RequestPtr bad = mesh.RecvFromAny(std::vector<int>{0, 1}, 3, MemoryRef{buffers[0].data(), 1});
    SHM_EXPECT(GetErrorKind(bad->Wait(Generous())) == ErrorKind::kInvalidArgument);
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

TEST_CASE("a tiny ring applies backpressure without deadlock, both directions at once") {
  const SingleCopyMode mode = AnyMode();
  INFO("single copy " << shm::SingleCopyModeName(mode));
  ShmOptions options = OptionsFor(mode);
  options.ring_bytes = 4096;  // eager limit 1 KiB, a handful of records
  options.staging_bytes = 8 * 4096;
  constexpr int kMessages = 300;  // more large sends than rendezvous slots
  const auto statuses = RunMeshThreads(2, options, [&](Mesh& mesh) -> absl::Status {
    auto connection = mesh.GetConnection(1 - mesh.rank());
    SHM_OK(connection.status());
    std::vector<std::vector<char>> out, in;
    std::vector<RequestPtr> sends, recvs;
    auto size_of = [](int i) { return i % 2 == 0 ? size_t{900} : size_t{70000}; };
    // Everyone sends everything before receiving anything.
    for (int i = 0; i < kMessages; ++i) {
      out.push_back(Pattern(size_of(i), i + 1000 * mesh.rank()));
      sends.push_back((*connection)->Send(i % 5, out.back().data(), out.back().size()));
    }
    for (int i = 0; i < kMessages; ++i) {
      in.emplace_back(size_of(i));
      recvs.push_back((*connection)->Recv(i % 5, in.back().data(), in.back().size()));
    }
    SHM_OK(WaitAll(recvs, Generous()));
    SHM_OK(WaitAll(sends, Generous()));
    for (int i = 0; i < kMessages; ++i) {
      SHM_OK(ExpectPattern(in[i].data(), size_of(i), i + 1000 * (1 - mesh.rank())));
    }
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

TEST_CASE("requests nobody waits on still complete (background progress)") {
  const SingleCopyMode mode = AnyMode();
  INFO("single copy " << shm::SingleCopyModeName(mode));
  const auto statuses = RunMeshThreads(2, OptionsFor(mode), [&](Mesh& mesh) -> absl::Status {
    auto connection = mesh.GetConnection(1 - mesh.rank());
    SHM_OK(connection.status());
    const std::vector<char> data = Pattern(kLarge * 3, 1);
    std::vector<char> into(data.size());
    RequestPtr request = mesh.rank() == 0 ? (*connection)->Send(1, data.data(), data.size())
                                          : (*connection)->Recv(1, into.data(), into.size());
    // Only IsDone(): no thread drives progress through Wait().
    const Deadline deadline = Generous();
    while (!request->IsDone() && !deadline.Expired()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    SHM_EXPECT(request->IsDone());
    SHM_OK(request->status());
    if (mesh.rank() == 1) SHM_OK(ExpectPattern(into.data(), into.size(), 1));
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

TEST_CASE("many threads of each rank post and wait concurrently") {
  const SingleCopyMode mode = AnyMode();
  INFO("single copy " << shm::SingleCopyModeName(mode));
  constexpr int kThreads = 4;
  constexpr int kRounds = 40;
  const auto statuses = RunMeshThreads(2, OptionsFor(mode), [&](Mesh& mesh) -> absl::Status {
    auto connection = mesh.GetConnection(1 - mesh.rank());
    SHM_OK(connection.status());
    std::vector<absl::Status> results(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        results[t] = [&]() -> absl::Status {
          for (int round = 0; round < kRounds; ++round) {
            const size_t size = round % 4 == 0 ? kLarge / 4 + t : 100 + t;
            const std::vector<char> out = Pattern(size, round * 10 + t);
            std::vector<char> in(size);
            RequestPtr send = (*connection)->Send(t, out.data(), size);
            RequestPtr recv = (*connection)->Recv(t, in.data(), size);
            SHM_OK(WaitAll({send, recv}, Generous()));
            SHM_OK(ExpectPattern(in.data(), size, round * 10 + t));
          }
          return absl::OkStatus();
        }();
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (const absl::Status& status : results) SHM_OK(status);
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

TEST_CASE("eight ranks on two cores: a ring exchange progresses when oversubscribed") {
  constexpr int kRanks = 8;
  constexpr int kRounds = 200;
  const auto statuses = RunMeshThreads(kRanks, ShmOptions{}, [&](Mesh& mesh) -> absl::Status {
    const int right = (mesh.rank() + 1) % kRanks;
    const int left = (mesh.rank() + kRanks - 1) % kRanks;
    auto to = mesh.GetConnection(right);
    auto from = mesh.GetConnection(left);
    SHM_OK(to.status());
    SHM_OK(from.status());
    uint64_t value = mesh.rank();
    for (int round = 0; round < kRounds; ++round) {
      uint64_t incoming = 0;
      RequestPtr recv = (*from)->Recv(round, &incoming, sizeof(incoming));
      RequestPtr send = (*to)->Send(round, &value, sizeof(value));
      SHM_OK(WaitAll({send, recv}, Generous()));
      if (round == 0) SHM_EXPECT(incoming == static_cast<uint64_t>(left), incoming);
      value = incoming;
    }
    // After kRounds shifts every value moved kRounds places to the right.
    SHM_EXPECT(value == static_cast<uint64_t>(((mesh.rank() - kRounds) % kRanks + kRanks) % kRanks),
               value);
    return absl::OkStatus();
  });
  REQUIRE(Failures(statuses) == "");
}

}  // namespace
}  // namespace chorus::shm_testing
