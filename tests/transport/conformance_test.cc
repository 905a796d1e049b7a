// The transport conformance suite: every transport in ConformanceTransports() must pass every
// case, with its ranks as threads of one process and as separate processes.
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "tests/transport/recording_sink.h"
#include "tests/transport/scenario.h"

namespace chorus::testing {
namespace {

constexpr absl::Duration kWait = absl::Seconds(30);

Deadline WaitDeadline() { return Deadline::After(kWait); }

// Runs `body` on `size` ranks for every transport, as threads and as processes.
void RunEverywhere(int size, const ScenarioBody& body) {
  for (const TransportFactory& transport : ConformanceTransports()) {
    for (RankMode mode : {RankMode::kThreads, RankMode::kProcesses}) {
      DYNAMIC_SECTION(transport.name << (mode == RankMode::kThreads ? " threads" : " processes")) {
        const std::vector<absl::Status> statuses = RunScenarioOnce(transport, mode, size, body);
        for (size_t rank = 0; rank < statuses.size(); ++rank) {
          INFO("rank " << rank << ": " << statuses[rank].ToString());
          CHECK(statuses[rank].ok());
        }
      }
    }
  }
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t ElapsedMs(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               since)
      .count();
}

TEST_CASE("messages with the same tag arrive in the order they were sent", "[conformance]") {
  RunEverywhere(2, [](RankEnv& env) -> absl::Status {
    constexpr int kMessages = 120;
    // Every third message is large enough to be striped, so order must hold across streams.
    auto size_of = [](int i) -> size_t { return i % 3 == 0 ? 70 * 1024 + i : 8 + i; };
    const int peer = 1 - env.rank;
    CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(peer));
    if (env.rank == 0) {
      std::vector<std::vector<uint8_t>> messages;
      std::vector<RequestPtr> sends;
      for (int i = 0; i < kMessages; ++i) messages.push_back(Pattern(i, size_of(i)));
      for (int i = 0; i < kMessages; ++i) {
        sends.push_back(connection->Send(7, messages[i].data(), messages[i].size()));
        // A second tag interleaved: its messages must not take tag 7's receives.
        sends.push_back(connection->Send(8, messages[i].data(), 4));
      }
      return WaitAll(sends, WaitDeadline());
    }
    std::vector<std::vector<uint8_t>> buffers(kMessages);
    std::vector<RequestPtr> receives;
    // Half posted at once, half after those completed (those arrive before they are posted).
    for (int i = 0; i < kMessages; ++i) {
      buffers[i].assign(size_of(i) + 16, 0);
      if (i == kMessages / 2) CHORUS_RETURN_IF_ERROR(WaitAll(receives, WaitDeadline()));
      receives.push_back(connection->Recv(7, buffers[i].data(), buffers[i].size()));
    }
    CHORUS_RETURN_IF_ERROR(WaitAll(receives, WaitDeadline()));
    for (int i = 0; i < kMessages; ++i) {
      SCENARIO_EXPECT(receives[i]->bytes() == size_of(i), "message ", i);
      const std::string diff = CheckPattern(buffers[i].data(), size_of(i), i);
      SCENARIO_EXPECT(diff.empty(), "message ", i, ": ", diff);
    }
    std::vector<uint8_t> small(4);
    for (int i = 0; i < kMessages; ++i) {
      RequestPtr request = connection->Recv(8, small.data(), small.size());
      CHORUS_RETURN_IF_ERROR(request->Wait(WaitDeadline()));
      SCENARIO_EXPECT(CheckPattern(small.data(), 4, i).empty(), "tag 8 message ", i);
    }
    return absl::OkStatus();
  });
}

TEST_CASE("hundreds of requests in flight in both directions", "[conformance]") {
  RunEverywhere(2, [](RankEnv& env) -> absl::Status {
    constexpr int kPerDirection = 300;
    const int peer = 1 - env.rank;
    CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(peer));
    auto size_of = [](int k) -> size_t { return k % 50 == 0 ? 100 * 1024 + k : 1 + k; };
    // Tag k carries message k; each side posts in its own shuffled order.
    std::vector<int> send_order(kPerDirection);
    std::vector<int> recv_order(kPerDirection);
    std::iota(send_order.begin(), send_order.end(), 0);
    std::iota(recv_order.begin(), recv_order.end(), 0);
    std::mt19937 random(17 + env.rank);
    std::shuffle(send_order.begin(), send_order.end(), random);
    std::shuffle(recv_order.begin(), recv_order.end(), random);
    std::vector<std::vector<uint8_t>> outgoing(kPerDirection);
    std::vector<std::vector<uint8_t>> incoming(kPerDirection);
    std::vector<RequestPtr> requests;
    for (int i = 0; i < kPerDirection; ++i) {
      const int r = recv_order[i];
      incoming[r].assign(size_of(r), 0);
      requests.push_back(connection->Recv(1000 + r, incoming[r].data(), incoming[r].size()));
      const int s = send_order[i];
      outgoing[s] = Pattern(s * 2 + env.rank, size_of(s));
      requests.push_back(connection->Send(1000 + s, outgoing[s].data(), outgoing[s].size()));
    }
    CHORUS_RETURN_IF_ERROR(WaitAll(requests, WaitDeadline()));
    for (int k = 0; k < kPerDirection; ++k) {
      const std::string diff = CheckPattern(incoming[k].data(), incoming[k].size(), k * 2 + peer);
      SCENARIO_EXPECT(diff.empty(), "tag ", 1000 + k, ": ", diff);
    }
    return absl::OkStatus();
  });
}

TEST_CASE("zero-length messages", "[conformance]") {
  RunEverywhere(2, [](RankEnv& env) -> absl::Status {
    CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(1 - env.rank));
    if (env.rank == 0) {
      RequestPtr first = connection->Send(5, nullptr, 0);
      RequestPtr second = connection->Send(5, nullptr, 0);
      return WaitAll({first, second}, WaitDeadline());
    }
    RequestPtr empty = connection->Recv(5, nullptr, 0);
    std::vector<uint8_t> buffer(16, 0xAB);
    RequestPtr roomy = connection->Recv(5, buffer.data(), buffer.size());
    CHORUS_RETURN_IF_ERROR(WaitAll({empty, roomy}, WaitDeadline()));
    SCENARIO_EXPECT(empty->bytes() == 0 && roomy->bytes() == 0, "");
    SCENARIO_EXPECT(std::all_of(buffer.begin(), buffer.end(), [](uint8_t b) { return b == 0xAB; }),
                    "an empty message wrote into the buffer");
    return absl::OkStatus();
  });
}

// The zero-length case's sender, the first rank to finish, exits while its receiver may not
// have matched anything yet: what it sent must still arrive, every time.
TEST_CASE("zero-length messages from a rank that exits at once, repeated", "[conformance]") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int kRepetitions = 40;
#else
  constexpr int kRepetitions = 200;
#endif
  for (const TransportFactory& transport : ConformanceTransports()) {
    DYNAMIC_SECTION(transport.name << " processes") {
      for (int repetition = 0; repetition < kRepetitions; ++repetition) {
        const std::vector<absl::Status> statuses = RunScenarioOnce(
            transport, RankMode::kProcesses, 2, [](RankEnv& env) -> absl::Status {
              CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(1 - env.rank));
              if (env.rank == 0) {
                return WaitAll({connection->Send(5, nullptr, 0), connection->Send(5, nullptr, 0)},
                               WaitDeadline());
              }
              return WaitAll({connection->Recv(5, nullptr, 0), connection->Recv(5, nullptr, 0)},
                             WaitDeadline());
            });
        for (size_t rank = 0; rank < statuses.size(); ++rank) {
          INFO("repetition " << repetition << ", rank " << rank << ": "
                             << statuses[rank].ToString());
          REQUIRE(statuses[rank].ok());
        }
      }
    }
  }
}

// True once process `pid` has ended (gone, or a zombie its parent has not reaped yet).
bool ProcessEnded(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t name_end = line.rfind(')');
  return name_end == std::string::npos || name_end + 2 >= line.size() ||
         line[name_end + 2] == 'Z' || line[name_end + 2] == 'X';
}

TEST_CASE("a sender's completed messages arrive after it exits or destroys its mesh",
          "[conformance]") {
  // Rank 0 completes sends of every size class and leaves at once: as a process, either
  // exiting on the spot or destroying its mesh first; as a thread, destroying its mesh. Rank 1
  // posts its receives only after that, and must get every message, then a clear error.
  for (const bool destroy_first : {false, true}) {
    DYNAMIC_SECTION((destroy_first ? "mesh destroyed, then exit: " : "plain exit: ")) {
      RunEverywhere(2, [destroy_first](RankEnv& env) -> absl::Status {
        constexpr int kPerClass = 6;
        const std::vector<size_t> classes = {0, 1000, 1 << 20};  // empty, eager, rendezvous
        auto seed_of = [](size_t c, int i) { return c * 100 + i; };
        if (env.rank == 0) {
          CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(1));
          std::vector<std::vector<uint8_t>> messages;
          std::vector<RequestPtr> sends;
          for (size_t c = 0; c < classes.size(); ++c) {
            for (int i = 0; i < kPerClass; ++i) {
              messages.push_back(Pattern(seed_of(c, i), classes[c]));
            }
          }
          for (size_t m = 0; m < messages.size(); ++m) {
            sends.push_back(connection->Send(static_cast<Tag>(90 + m / kPerClass),
                                             messages[m].data(), messages[m].size()));
          }
          CHORUS_RETURN_IF_ERROR(WaitAll(sends, WaitDeadline()));
          if (destroy_first || !env.separate_process) env.mesh->reset();
          CHORUS_RETURN_IF_ERROR(env.store->Set("sent", absl::StrCat(getpid())));
          // The raw exit_group skips every exit hook: nothing of the mesh's is torn down.
          if (env.separate_process) syscall(SYS_exit_group, 0);
          return absl::OkStatus();
        }
        CHORUS_ASSIGN_OR_RETURN(const std::string sender, env.store->Get("sent", WaitDeadline()));
        if (env.separate_process) {
          const pid_t pid = std::stoi(sender);
          const auto since = std::chrono::steady_clock::now();
          while (!ProcessEnded(pid) && ElapsedMs(since) < 10000) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          SCENARIO_EXPECT(ProcessEnded(pid), "rank 0 (pid ", pid, ") did not exit in 10 s");
        }
        CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(0));
        for (size_t c = 0; c < classes.size(); ++c) {
          for (int i = 0; i < kPerClass; ++i) {
            std::vector<uint8_t> buffer(classes[c] + 8, 0);
            const absl::Status status =
                connection->Recv(static_cast<Tag>(90 + c), buffer.data(), buffer.size())
                    ->Wait(WaitDeadline());
            SCENARIO_EXPECT(status.ok(), "message ", i, " of ", classes[c], " bytes: ",
                            status.ToString());
            const std::string diff = CheckPattern(buffer.data(), classes[c], seed_of(c, i));
            SCENARIO_EXPECT(diff.empty(), "message ", i, " of ", classes[c], " bytes: ", diff);
          }
        }
        uint8_t byte = 0;
        const absl::Status after = connection->Recv(90, &byte, 1)->Wait(WaitDeadline());
        SCENARIO_EXPECT(GetErrorKind(after) == ErrorKind::kPeerUnavailable &&
                            ErrorPeerRank(after) == 0,
                        after.ToString());
        return absl::OkStatus();
      });
    }
  }
}

TEST_CASE(
    "receives posted before and after the message arrives, small to 64 MiB, with and without a "
    "sink",
    "[conformance]") {
  // With a sink (Connection::RecvWithSink) every byte arrives once, either through the sink or
  // in the buffer, the transport's choice per message.
  RunEverywhere(2, [](RankEnv& env) -> absl::Status {
    const std::vector<size_t> sizes = {0, 8, 200 * 1024, kLargeMessageBytes};
    CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(1 - env.rank));
    for (size_t i = 0; i < 2 * sizes.size(); ++i) {
      const size_t size = sizes[i % sizes.size()];
      const bool with_sink = i >= sizes.size();
      const Tag early = 20 + 2 * i;  // receive posted before the send
      const Tag late = 21 + 2 * i;   // send complete before the receive is posted
      const std::vector<uint8_t> data = Pattern(i, size);
      if (env.rank == 0) {
        CHORUS_RETURN_IF_ERROR(Barrier(env, absl::StrCat("posted", i)));
        CHORUS_RETURN_IF_ERROR(
            connection->Send(early, data.data(), data.size())->Wait(WaitDeadline()));
        CHORUS_RETURN_IF_ERROR(
            connection->Send(late, data.data(), data.size())->Wait(WaitDeadline()));
        CHORUS_RETURN_IF_ERROR(Barrier(env, absl::StrCat("sent", i)));
        continue;
      }
      std::vector<uint8_t> buffer;
      std::unique_ptr<RecordingSink> sink;
      auto post = [&](Tag tag) {
        buffer.assign(size, 0xEE);
        if (!with_sink) return connection->Recv(tag, buffer.data(), buffer.size());
        sink = std::make_unique<RecordingSink>(size);
        return connection->RecvWithSink(tag, MemoryRef{buffer.data(), buffer.size()}, sink.get());
      };
      auto check = [&](const char* when, const RequestPtr& request) -> absl::Status {
        CHORUS_RETURN_IF_ERROR(request->Wait(WaitDeadline()));
        SCENARIO_EXPECT(request->bytes() == size, when, " ", size, " bytes");
        if (sink != nullptr && sink->pieces() > 0) {
          CHORUS_RETURN_IF_ERROR(sink->Check(size));
          const std::string diff = CheckPattern(sink->data().data(), size, i);
          SCENARIO_EXPECT(diff.empty(), when, ", ", size, " bytes through the sink: ", diff);
          SCENARIO_EXPECT(
              std::all_of(buffer.begin(), buffer.end(), [](uint8_t b) { return b == 0xEE; }), when,
              ", ", size, " bytes: the sink took the message but the buffer was written");
          return absl::OkStatus();
        }
        const std::string diff = CheckPattern(buffer.data(), size, i);
        SCENARIO_EXPECT(diff.empty(), when, ", ", size, " bytes into the buffer: ", diff);
        return absl::OkStatus();
      };
      RequestPtr request = post(early);
      CHORUS_RETURN_IF_ERROR(Barrier(env, absl::StrCat("posted", i)));
      CHORUS_RETURN_IF_ERROR(check("posted before", request));
      CHORUS_RETURN_IF_ERROR(Barrier(env, absl::StrCat("sent", i)));
      CHORUS_RETURN_IF_ERROR(check("posted after", post(late)));
    }
    return absl::OkStatus();
  });
}

TEST_CASE("a receive with a sink refuses a longer message without handing over a byte",
          "[conformance]") {
  RunEverywhere(2, [](RankEnv& env) -> absl::Status {
    constexpr size_t kCapacity = 4096;
    const std::vector<size_t> sizes = {kCapacity + 64, 2 << 20};
    CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(1 - env.rank));
    for (size_t i = 0; i < sizes.size(); ++i) {
      const Tag tag = 60 + i;
      if (env.rank == 0) {
        const std::vector<uint8_t> data = Pattern(i, sizes[i]);
        CHORUS_RETURN_IF_ERROR(Barrier(env, absl::StrCat("posted", i)));
        CHORUS_RETURN_IF_ERROR(
            connection->Send(tag, data.data(), data.size())->Wait(WaitDeadline()));
        CHORUS_RETURN_IF_ERROR(Barrier(env, absl::StrCat("checked", i)));
        continue;
      }
      std::vector<uint8_t> buffer(kCapacity, 0xEE);
      RecordingSink sink(kCapacity);
      RequestPtr request =
          connection->RecvWithSink(tag, MemoryRef{buffer.data(), buffer.size()}, &sink);
      CHORUS_RETURN_IF_ERROR(Barrier(env, absl::StrCat("posted", i)));
      const absl::Status status = request->Wait(WaitDeadline());
      SCENARIO_EXPECT(GetErrorKind(status) == ErrorKind::kInvalidArgument, status.ToString());
      SCENARIO_EXPECT(sink.pieces() == 0, sink.pieces(), " pieces of a ", sizes[i],
                      "-byte message went to the sink");
      // The sender's send completes once the transport has disposed of the message.
      CHORUS_RETURN_IF_ERROR(Barrier(env, absl::StrCat("checked", i)));
    }
    return absl::OkStatus();
  });
}

TEST_CASE("a message longer than the receive buffer fails the receive and writes nothing past it",
          "[conformance]") {
  RunEverywhere(2, [](RankEnv& env) -> absl::Status {
    constexpr size_t kCapacity = 100;
    constexpr size_t kGuard = 64;
    // (message size, posted before it arrives?)
    const std::vector<std::pair<size_t, bool>> cases = {
        {1000, true}, {1000, false}, {2 << 20, true}, {2 << 20, false}};
    CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(1 - env.rank));
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto [size, posted_first] = cases[i];
      const Tag tag = 30 + i;
      if (env.rank == 0) {
        const std::vector<uint8_t> long_message = Pattern(i, size);
        const std::vector<uint8_t> next_message = Pattern(100 + i, 50);
        CHORUS_RETURN_IF_ERROR(Barrier(env, absl::StrCat("posted", i)));
        CHORUS_RETURN_IF_ERROR(WaitAll({connection->Send(tag, long_message.data(), size),
                                        connection->Send(tag, next_message.data(), 50)},
                                       WaitDeadline()));
        CHORUS_RETURN_IF_ERROR(Barrier(env, absl::StrCat("sent", i)));
        continue;
      }
      std::vector<uint8_t> buffer(kCapacity + kGuard, 0xEE);
      RequestPtr request;
      if (posted_first) request = connection->Recv(tag, buffer.data(), kCapacity);
      CHORUS_RETURN_IF_ERROR(Barrier(env, absl::StrCat("posted", i)));
      CHORUS_RETURN_IF_ERROR(Barrier(env, absl::StrCat("sent", i)));
      if (!posted_first) request = connection->Recv(tag, buffer.data(), kCapacity);
      const absl::Status status = request->Wait(WaitDeadline());
      SCENARIO_EXPECT(GetErrorKind(status) == ErrorKind::kInvalidArgument, status.ToString());
      SCENARIO_EXPECT(absl::StrContains(status.message(), "longer than the receive buffer"),
                      status.ToString());
      for (size_t g = kCapacity; g < buffer.size(); ++g) {
        SCENARIO_EXPECT(buffer[g] == 0xEE, "guard byte ", g - kCapacity, " overwritten");
      }
      // The stream stays in step: the next message on the tag arrives intact.
      std::vector<uint8_t> next(50);
      RequestPtr after = connection->Recv(tag, next.data(), next.size());
      CHORUS_RETURN_IF_ERROR(after->Wait(WaitDeadline()));
      SCENARIO_EXPECT(CheckPattern(next.data(), 50, 100 + i).empty(), "message after case ", i);
    }
    return absl::OkStatus();
  });
}

TEST_CASE("a cancelled receive never touches its buffer again", "[conformance]") {
  RunEverywhere(2, [](RankEnv& env) -> absl::Status {
    CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(1 - env.rank));
    constexpr size_t kLarge = kLargeMessageBytes / 2;
    const std::vector<uint8_t> small = Pattern(1, 64);
    const std::vector<uint8_t> marker = Pattern(2, 32);
    if (env.rank == 0) {
      CHORUS_RETURN_IF_ERROR(Barrier(env, "cancelled"));
      CHORUS_RETURN_IF_ERROR(
          connection->Send(40, small.data(), small.size())->Wait(WaitDeadline()));
      const std::vector<uint8_t> large = Pattern(3, kLarge);
      CHORUS_RETURN_IF_ERROR(Barrier(env, "large posted"));
      RequestPtr send = connection->Send(41, large.data(), large.size());
      CHORUS_RETURN_IF_ERROR(env.store->Set("large sending", "1"));
      RequestPtr send_marker = connection->Send(41, marker.data(), marker.size());
      return WaitAll({send, send_marker}, WaitDeadline());
    }
    // A receive cancelled before its message comes: the message goes to the next receive.
    std::vector<uint8_t> buffer(64, 0xAB);
    RequestPtr cancelled = connection->Recv(40, buffer.data(), buffer.size());
    cancelled->Cancel();
    SCENARIO_EXPECT(cancelled->IsDone(), "");
    SCENARIO_EXPECT(GetErrorKind(cancelled->status()) == ErrorKind::kAborted,
                    cancelled->status().ToString());
    CHORUS_RETURN_IF_ERROR(Barrier(env, "cancelled"));
    std::vector<uint8_t> other(64);
    CHORUS_RETURN_IF_ERROR(connection->Recv(40, other.data(), other.size())->Wait(WaitDeadline()));
    SCENARIO_EXPECT(CheckPattern(other.data(), 64, 1).empty(), "");
    SCENARIO_EXPECT(std::all_of(buffer.begin(), buffer.end(), [](uint8_t b) { return b == 0xAB; }),
                    "the cancelled receive's buffer was written");
    // A receive cancelled while (most likely) its message streams in: the rest is discarded.
    // (tcp_test stops the sender to cancel mid-message for certain.)
    std::vector<uint8_t> large(kLarge, 0);
    RequestPtr streaming = connection->Recv(41, large.data(), large.size());
    CHORUS_RETURN_IF_ERROR(Barrier(env, "large posted"));
    CHORUS_RETURN_IF_ERROR(env.store->Get("large sending", WaitDeadline()).status());
    streaming->Cancel();
    const std::vector<uint8_t> snapshot = large;
    const bool finished_first = streaming->IsDone() && streaming->status().ok();
    // If the cancel came before the message was matched, the large message goes to the next
    // receive; else it was discarded. Either way the marker follows, intact.
    std::vector<uint8_t> next(kLarge);
    RequestPtr after = connection->Recv(41, next.data(), next.size());
    CHORUS_RETURN_IF_ERROR(after->Wait(WaitDeadline()));
    if (after->bytes() == kLarge) {
      SCENARIO_EXPECT(CheckPattern(next.data(), kLarge, 3).empty(), "the large message");
      after = connection->Recv(41, next.data(), next.size());
      CHORUS_RETURN_IF_ERROR(after->Wait(WaitDeadline()));
    }
    SCENARIO_EXPECT(after->bytes() == 32 && CheckPattern(next.data(), 32, 2).empty(),
                    "the message after the cancelled one");
    SCENARIO_EXPECT(large == snapshot, "the buffer changed after Cancel() returned");
    if (!finished_first) {
      SCENARIO_EXPECT(GetErrorKind(streaming->status()) == ErrorKind::kAborted, "");
    }
    return absl::OkStatus();
  });
}

TEST_CASE("a cancelled send never reads its buffer again", "[conformance]") {
  RunEverywhere(2, [](RankEnv& env) -> absl::Status {
    CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(1 - env.rank));
    constexpr size_t kLarge = 16 << 20;
    const std::vector<uint8_t> marker = Pattern(9, 16);
    if (env.rank == 0) {
      // Cancelled at once (likely before the connection is up), then mid-way through a
      // large send; the buffers are scribbled over as soon as Cancel returns.
      std::vector<uint8_t> early = Pattern(5, 1000);
      RequestPtr first = connection->Send(42, early.data(), early.size());
      first->Cancel();
      std::fill(early.begin(), early.end(), 0);
      std::vector<uint8_t> large = Pattern(6, kLarge);
      RequestPtr second = connection->Send(42, large.data(), large.size());
      second->Cancel();
      std::fill(large.begin(), large.end(), 0);
      SCENARIO_EXPECT(first->IsDone() && second->IsDone(), "");
      CHORUS_RETURN_IF_ERROR(
          connection->Send(42, marker.data(), marker.size())->Wait(WaitDeadline()));
      return Barrier(env, "done");
    }
    // Whatever arrives before the marker must be an intact message that was sent, not the
    // scribbled-over buffer.
    std::vector<uint8_t> buffer(kLarge);
    for (int received = 0; received < 3; ++received) {
      RequestPtr request = connection->Recv(42, buffer.data(), buffer.size());
      CHORUS_RETURN_IF_ERROR(request->Wait(WaitDeadline()));
      const size_t bytes = request->bytes();
      if (bytes == marker.size() && CheckPattern(buffer.data(), bytes, 9).empty()) {
        return Barrier(env, "done");
      }
      const uint64_t seed = bytes == 1000 ? 5 : 6;
      SCENARIO_EXPECT(bytes == 1000 || bytes == kLarge, "unexpected size ", bytes);
      const std::string diff = CheckPattern(buffer.data(), bytes, seed);
      SCENARIO_EXPECT(diff.empty(), "a cancelled send delivered changed data: ", diff);
    }
    return InternalError("the marker never arrived");
  });
}

TEST_CASE("a receive with no sender times out at its deadline naming the peer", "[conformance]") {
  RunEverywhere(2, [](RankEnv& env) -> absl::Status {
    CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(1 - env.rank));
    if (env.rank == 1) {
      std::vector<uint8_t> buffer(8);
      RequestPtr request = connection->Recv(50, buffer.data(), buffer.size());
      const auto start = std::chrono::steady_clock::now();
      const absl::Status status = request->Wait(Deadline::After(absl::Milliseconds(300)));
      const int64_t elapsed = ElapsedMs(start);
      SCENARIO_EXPECT(GetErrorKind(status) == ErrorKind::kDeadlineExceeded, status.ToString());
      SCENARIO_EXPECT(elapsed >= 295 && elapsed < 1300, "waited ", elapsed, " ms");
      SCENARIO_EXPECT(ErrorPeerRank(status) == 0, status.ToString());
      SCENARIO_EXPECT(absl::StrContains(status.message(), "rank 0"), status.ToString());
      SCENARIO_EXPECT(!request->IsDone(), "a timed-out wait completed the request");
      request->Cancel();
      SCENARIO_EXPECT(GetErrorKind(request->status()) == ErrorKind::kAborted, "");
    }
    return Barrier(env, "done");
  });
}

TEST_CASE("RecvFromAny takes exactly one message from any of the peers", "[conformance]") {
  RunEverywhere(3, [](RankEnv& env) -> absl::Status {
    const std::vector<int> senders = {1, 2};
    if (env.rank != 0) {
      CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(0));
      const std::vector<uint8_t> data = Pattern(env.rank, 100);
      CHORUS_RETURN_IF_ERROR(Barrier(env, "posted"));
      CHORUS_RETURN_IF_ERROR(connection->Send(60, data.data(), data.size())->Wait(WaitDeadline()));
      CHORUS_RETURN_IF_ERROR(connection->Send(61, data.data(), data.size())->Wait(WaitDeadline()));
      CHORUS_RETURN_IF_ERROR(connection->Send(62, data.data(), data.size())->Wait(WaitDeadline()));
      CHORUS_RETURN_IF_ERROR(Barrier(env, "sent"));
      return Barrier(env, "done");
    }
    std::vector<std::vector<uint8_t>> buffers(4, std::vector<uint8_t>(100));
    // Posted before the messages come.
    RequestPtr a = env.m().RecvFromAny(senders, 60, MemoryRef{buffers[0].data(), 100});
    RequestPtr b = env.m().RecvFromAny(senders, 60, MemoryRef{buffers[1].data(), 100});
    SCENARIO_EXPECT(a->peer() == -1, "");
    CHORUS_RETURN_IF_ERROR(Barrier(env, "posted"));
    CHORUS_RETURN_IF_ERROR(WaitAll({a, b}, WaitDeadline()));
    SCENARIO_EXPECT((a->peer() == 1 && b->peer() == 2) || (a->peer() == 2 && b->peer() == 1),
                    "peers ", a->peer(), " and ", b->peer());
    SCENARIO_EXPECT(CheckPattern(buffers[0].data(), 100, a->peer()).empty(), "");
    SCENARIO_EXPECT(CheckPattern(buffers[1].data(), 100, b->peer()).empty(), "");
    // Posted after the messages are here.
    CHORUS_RETURN_IF_ERROR(Barrier(env, "sent"));
    RequestPtr c = env.m().RecvFromAny(senders, 61, MemoryRef{buffers[2].data(), 100});
    RequestPtr d = env.m().RecvFromAny(senders, 61, MemoryRef{buffers[3].data(), 100});
    CHORUS_RETURN_IF_ERROR(WaitAll({c, d}, WaitDeadline()));
    SCENARIO_EXPECT(c->peer() + d->peer() == 3 && c->peer() != d->peer(), "");
    SCENARIO_EXPECT(CheckPattern(buffers[2].data(), 100, c->peer()).empty(), "");
    // Exactly one: after one RecvFromAny, the taken sender has nothing left on tag 62.
    RequestPtr any = env.m().RecvFromAny(senders, 62, MemoryRef{buffers[0].data(), 100});
    CHORUS_RETURN_IF_ERROR(any->Wait(WaitDeadline()));
    const int taken = any->peer();
    const int other = 3 - taken;
    CHORUS_ASSIGN_OR_RETURN(Connection * to_other, env.To(other));
    CHORUS_ASSIGN_OR_RETURN(Connection * to_taken, env.To(taken));
    CHORUS_RETURN_IF_ERROR(to_other->Recv(62, buffers[1].data(), 100)->Wait(WaitDeadline()));
    SCENARIO_EXPECT(CheckPattern(buffers[1].data(), 100, other).empty(), "");
    RequestPtr none = to_taken->Recv(62, buffers[2].data(), 100);
    const absl::Status status = none->Wait(Deadline::After(absl::Milliseconds(200)));
    SCENARIO_EXPECT(GetErrorKind(status) == ErrorKind::kDeadlineExceeded,
                    "a second message from rank ", taken, ": ", status.ToString());
    none->Cancel();
    return Barrier(env, "done");
  });
}

TEST_CASE("Abort fails pending and later requests promptly, also while another thread waits",
          "[conformance]") {
  RunEverywhere(2, [](RankEnv& env) -> absl::Status {
    const int peer = 1 - env.rank;
    CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(peer));
    uint8_t byte = 1;
    // Connected in both directions before the abort.
    CHORUS_RETURN_IF_ERROR(
        WaitAll({connection->Send(69, &byte, 1), connection->Recv(69, &byte, 1)}, WaitDeadline()));
    std::vector<uint8_t> buffer(8);
    RequestPtr pending = connection->Recv(70, buffer.data(), buffer.size());
    CHORUS_RETURN_IF_ERROR(Barrier(env, "posted"));
    if (env.rank == 0) {
      std::atomic<int64_t> waited_ms{-1};
      absl::Status waited;
      std::thread waiter([&] {
        const auto start = std::chrono::steady_clock::now();
        waited = pending->Wait(WaitDeadline());
        waited_ms = ElapsedMs(start);
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const auto abort_start = std::chrono::steady_clock::now();
      env.m().Abort("the test aborts");
      waiter.join();
      SCENARIO_EXPECT(ElapsedMs(abort_start) < 1000, "abort took ", ElapsedMs(abort_start), " ms");
      SCENARIO_EXPECT(GetErrorKind(waited) == ErrorKind::kAborted, waited.ToString());
      SCENARIO_EXPECT(absl::StrContains(waited.message(), "the test aborts"), waited.ToString());
      const absl::Status later = connection->Send(71, &byte, 1)->Wait(WaitDeadline());
      SCENARIO_EXPECT(GetErrorKind(later) == ErrorKind::kAborted, later.ToString());
      const int one[] = {1};
      const absl::Status any =
          env.m().RecvFromAny(one, 72, MemoryRef{&byte, 1})->Wait(WaitDeadline());
      SCENARIO_EXPECT(GetErrorKind(any) == ErrorKind::kAborted, any.ToString());
    } else {
      // The aborted rank closed its connections: this side's pending receive fails at once.
      const auto start = std::chrono::steady_clock::now();
      const absl::Status status = pending->Wait(WaitDeadline());
      SCENARIO_EXPECT(GetErrorKind(status) == ErrorKind::kPeerUnavailable, status.ToString());
      SCENARIO_EXPECT(ErrorPeerRank(status) == 0, status.ToString());
      SCENARIO_EXPECT(ElapsedMs(start) < 5000, "noticed after ", ElapsedMs(start), " ms");
    }
    return Barrier(env, "done");
  });
}

TEST_CASE("a peer that goes away fails pending and later requests promptly, naming it",
          "[conformance]") {
  RunEverywhere(2, [](RankEnv& env) -> absl::Status {
    const int peer = 1 - env.rank;
    CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(peer));
    uint8_t byte = 1;
    CHORUS_RETURN_IF_ERROR(
        WaitAll({connection->Send(79, &byte, 1), connection->Recv(79, &byte, 1)}, WaitDeadline()));
    if (env.rank == 1) {
      CHORUS_RETURN_IF_ERROR(Barrier(env, "posted"));
      CHORUS_RETURN_IF_ERROR(env.store->Set("leaving at", absl::StrCat(NowNs())));
      // A process just ends (its sockets close with it); a thread rank drops its mesh. The raw
      // exit_group skips the sanitizers' exit hooks (TSan sleeps a second in _exit).
      if (env.separate_process) syscall(SYS_exit_group, 0);
      env.mesh->reset();
      return absl::OkStatus();
    }
    std::vector<uint8_t> buffer(8);
    RequestPtr pending = connection->Recv(80, buffer.data(), buffer.size());
    CHORUS_RETURN_IF_ERROR(Barrier(env, "posted"));
    const absl::Status status = pending->Wait(WaitDeadline());
    const int64_t failed_at = NowNs();
    SCENARIO_EXPECT(GetErrorKind(status) == ErrorKind::kPeerUnavailable, status.ToString());
    SCENARIO_EXPECT(ErrorPeerRank(status) == 1, status.ToString());
    SCENARIO_EXPECT(absl::StrContains(status.message(), "rank 1"), status.ToString());
    CHORUS_ASSIGN_OR_RETURN(const std::string left_at,
                            env.store->Get("leaving at", WaitDeadline()));
    const int64_t after_ms = (failed_at - std::stoll(left_at)) / 1000000;
    SCENARIO_EXPECT(after_ms < 1000, "noticed ", after_ms, " ms after rank 1 left");
    const absl::Status send = connection->Send(81, &byte, 1)->Wait(WaitDeadline());
    SCENARIO_EXPECT(GetErrorKind(send) == ErrorKind::kPeerUnavailable && ErrorPeerRank(send) == 1,
                    send.ToString());
    const absl::Status recv = connection->Recv(82, &byte, 1)->Wait(WaitDeadline());
    SCENARIO_EXPECT(GetErrorKind(recv) == ErrorKind::kPeerUnavailable, recv.ToString());
    return absl::OkStatus();
  });
}

}  // namespace
}  // namespace chorus::testing
