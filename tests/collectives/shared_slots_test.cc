// The shared_slots algorithm: small allreduce, broadcast and barrier between ranks that share
// memory, through the mesh's shared slots instead of messages, and larger allreduce and broadcast
// through the ranks' shared buffers. Results for every type and op (BuildCases' stand-ins under
// ThreadSanitizer); the selector's choice; more calls in flight than a rank has slots, small and
// buffered mixed; a broadcast root that runs ahead of its readers, and the disagreements only
// its deferred check of its neighbour sees; a disagreement with a rank that runs the call with
// messages; a timeout and Work::Abort, after which the communicator still works (the reads they
// owed are paid), and a rank that gives up on a buffered call, which fails its peers at once; a
// rule naming the slots for a call too large for them; a peer that dies; sub-communicators,
// which run on messages.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "chorus/collectives/algorithms/algorithms.h"
#include "chorus/collectives/engine/header_ring.h"
#include "chorus/core/deadline.h"
#include "chorus/core/status.h"
#include "tests/collectives/cases.h"
#include "tests/collectives/test_transport.h"

namespace chorus::testing {
namespace {

const TransportKind kTransport = kTestTransport;
// Every case fits a slot: 512 elements of the widest type are 4 KiB.
const std::vector<size_t> kCounts = {0, 1, 7, 512};
// Allreduce and broadcast counts that need the buffers in some or all types (from 4097 bytes),
// with allreduce pieces of uneven length (the pieces are whole cache lines, the last one short),
// and the largest buffer of 8-byte elements.
const std::vector<size_t> kBufferedCounts = {1025, 4097, 33333};
constexpr size_t kLargestBufferedCount = kSharedBufferPayloadBytes / 8;
constexpr int kManyCalls = 3 * 8;  // three times the slots a rank has

Matrix SlotMatrix(std::vector<std::string> algorithms) {
  Matrix matrix;
  matrix.kinds = {CollectiveKind::kAllReduce, CollectiveKind::kBroadcast, CollectiveKind::kBarrier};
  matrix.counts = kCounts;
  matrix.algorithms = std::move(algorithms);
  return matrix;
}

Matrix BufferedMatrix() {
  Matrix matrix;
  matrix.kinds = {CollectiveKind::kAllReduce, CollectiveKind::kBroadcast};
  matrix.counts = kBufferedCounts;
  matrix.algorithms = {"shared_slots"};
  return matrix;
}

// One buffered allreduce of `count` int64, rank r giving r + call + i at element i.
absl::Status BufferedSum(Communicator& comm, size_t count, int call) {
  const int64_t p = comm.size();
  std::vector<int64_t> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = comm.rank() + call + static_cast<int64_t>(i);
  CollectiveOptions named;
  named.algorithm = "shared_slots";
  CHORUS_RETURN_IF_ERROR(
      comm.AllReduce(values.data(), values.data(), count, DataType::kInt64, ReduceOp::kSum, named));
  for (size_t i = 0; i < count; ++i) {
    const int64_t expected = p * (p - 1) / 2 + p * (call + static_cast<int64_t>(i));
    if (values[i] != expected) {
      return Expect(false, absl::StrCat("call ", call, ", element ", i, " of ", count, ": ",
                                        values[i], ", expected ", expected));
    }
  }
  return absl::OkStatus();
}

void CheckAll(const std::vector<absl::Status>& statuses) {
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].ToString());
    CHECK(statuses[rank].ok());
  }
}

// `count` sums of one int64 per rank, each call's inputs distinct: rank r gives r + call.
absl::Status SumCalls(Communicator& comm, int calls) {
  const int64_t p = comm.size();
  for (int call = 0; call < calls; ++call) {
    int64_t value = comm.rank() + call;
    CHORUS_RETURN_IF_ERROR(comm.AllReduce(&value, &value, 1, DataType::kInt64, ReduceOp::kSum));
    const int64_t expected = p * (p - 1) / 2 + p * call;
    CHORUS_RETURN_IF_ERROR(Expect(
        value == expected, absl::StrCat("call ", call, ": sum ", value, ", expected ", expected)));
  }
  return absl::OkStatus();
}

TEST_CASE("the types and ops through the shared slots, named and chosen", "[slots]") {
  for (int ranks : {2, 3, 5}) {
    INFO(ranks << " ranks");
    CheckAll(RunOnThreadsAll(
        kTransport, ranks,
        [&](Communicator& comm) -> absl::Status {
          CHORUS_ASSIGN_OR_RETURN(const std::string small,
                                  comm.ChooseAlgorithm(CollectiveKind::kAllReduce, 4096));
          CHORUS_ASSIGN_OR_RETURN(const std::string barrier,
                                  comm.ChooseAlgorithm(CollectiveKind::kBarrier, 0));
          CHORUS_RETURN_IF_ERROR(Expect(small == "shared_slots" && barrier == "shared_slots",
                                        "chose " + small + " and " + barrier));
          constexpr size_t kFull = kSharedBufferPayloadBytes;
          for (CollectiveKind kind : {CollectiveKind::kAllReduce, CollectiveKind::kBroadcast}) {
            CHORUS_ASSIGN_OR_RETURN(const std::string buffered, comm.ChooseAlgorithm(kind, kFull));
            CHORUS_ASSIGN_OR_RETURN(const std::string large, comm.ChooseAlgorithm(kind, kFull + 1));
            CHORUS_RETURN_IF_ERROR(Expect(buffered == "shared_slots" && large != "shared_slots",
                                          "chose " + buffered + " and " + large));
          }
          // Named for more than the buffers carry: refused before it is numbered, on every rank
          // alike, so the calls below still agree.
          std::vector<uint8_t> too_large(kFull + 1);
          CollectiveOptions named;
          named.algorithm = "shared_slots";
          CHORUS_RETURN_IF_ERROR(ExpectInvalidArgument(
              comm.Broadcast(too_large.data(), too_large.data(), too_large.size(), DataType::kUint8,
                             0, named),
              absl::StrCat("carries at most ", kFull, " bytes of broadcast, not ", kFull + 1)));
          CHORUS_RETURN_IF_ERROR(ExpectInvalidArgument(
              comm.AllReduce(too_large.data(), too_large.data(), too_large.size(), DataType::kUint8,
                             ReduceOp::kSum, named),
              absl::StrCat("carries at most ", kFull, " bytes of allreduce, not ", kFull + 1)));
          CHORUS_RETURN_IF_ERROR(RunCases(comm, BuildCases(SlotMatrix({"shared_slots"}), ranks)));
          CHORUS_RETURN_IF_ERROR(RunCases(comm, BuildCases(BufferedMatrix(), ranks)));
          CHORUS_RETURN_IF_ERROR(BufferedSum(comm, kLargestBufferedCount, 0));
          return RunCases(comm, BuildCases(SlotMatrix({""}), ranks));
        },
        absl::Minutes(2)));
  }
}

TEST_CASE("more calls in flight than a rank has slots", "[slots]") {
  CheckAll(RunOnThreadsAll(
      kTransport, 3,
      [&](Communicator& comm) -> absl::Status {
        std::vector<int64_t> values(kManyCalls);
        std::vector<WorkPtr> works;
        for (int call = 0; call < kManyCalls; ++call) {
          values[call] = comm.rank() * 1000 + call;
          works.push_back(comm.AllReduceAsync(&values[call], &values[call], 1, DataType::kInt64,
                                              ReduceOp::kSum));
        }
        for (const WorkPtr& work : works) CHORUS_RETURN_IF_ERROR(work->Wait());
        for (int call = 0; call < kManyCalls; ++call) {
          const int64_t expected = 3000 + 3 * call;  // (0 + 1 + 2) * 1000 + 3 * call
          CHORUS_RETURN_IF_ERROR(
              Expect(values[call] == expected, absl::StrCat("call ", call, ": ", values[call])));
        }
        return SumCalls(comm, kManyCalls);
      },
      absl::Minutes(1)));
}

TEST_CASE("buffered and small calls in flight, more than a rank has slots", "[slots]") {
  // Three calls in four fill the buffers back to back, each waiting for the readers of the
  // calls before that used its region: two in four take half a buffer, one (an allreduce of
  // more than a quarter of the buffer) the whole buffer; every fourth rides a slot alone. (Each
  // call waits for every rank, so the halves are seldom both in use here; the broadcasts below make
  // sure they are.)
  CheckAll(RunOnThreadsAll(
      kTransport, 3,
      [&](Communicator& comm) -> absl::Status {
        constexpr size_t kBuffered = 3000;  // int64: 24000 bytes
        constexpr size_t kWhole = SharedSlots::kBufferBytes / 4 / sizeof(int64_t) + 1;
        std::vector<std::vector<int64_t>> values(kManyCalls);
        std::vector<WorkPtr> works;
        CollectiveOptions named;
        named.algorithm = "shared_slots";
        for (int call = 0; call < kManyCalls; ++call) {
          const size_t count = call % 4 == 3 ? 1 : call % 4 == 1 ? kWhole : kBuffered;
          values[call].assign(count, comm.rank() * 1000 + call);
          works.push_back(comm.AllReduceAsync(values[call].data(), values[call].data(),
                                              values[call].size(), DataType::kInt64, ReduceOp::kSum,
                                              named));
        }
        for (const WorkPtr& work : works) CHORUS_RETURN_IF_ERROR(work->Wait());
        for (int call = 0; call < kManyCalls; ++call) {
          const int64_t expected = 3000 + 3 * call;  // (0 + 1 + 2) * 1000 + 3 * call
          for (int64_t value : values[call]) {
            CHORUS_RETURN_IF_ERROR(
                Expect(value == expected, absl::StrCat("call ", call, ": ", value)));
          }
        }
        for (int call = 0; call < kManyCalls; ++call) {
          CHORUS_RETURN_IF_ERROR(BufferedSum(comm, kBuffered + call, call));
        }
        return absl::OkStatus();
      },
      absl::Minutes(1)));
}

TEST_CASE("a root fills one half of its buffer while a late rank reads the other", "[slots]") {
  // Rank 1 enters each broadcast late, so it is still copying the root's previous call when the
  // root (which waits only for rank 2's header) publishes the next: that call must take the
  // other half. Every fourth is the largest a half holds.
  CheckAll(RunOnThreadsAll(
      kTransport, 3,
      [&](Communicator& comm) -> absl::Status {
        constexpr size_t kHalf = SharedSlots::kBufferBytes / 2;
        for (int call = 0; call < 24; ++call) {
          const size_t bytes = call % 4 == 3 ? kHalf : kHalf - 40000 * call;
          std::vector<uint8_t> data(bytes);
          for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 7 + call);
          std::vector<uint8_t> out(bytes, 0);
          if (comm.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));
          CHORUS_RETURN_IF_ERROR(
              comm.Broadcast(data.data(), out.data(), bytes, DataType::kUint8, /*root=*/0));
          const auto wrong = std::mismatch(out.begin(), out.end(), data.begin());
          if (wrong.first != out.end()) {
            return InternalError(absl::StrCat("call ", call, ": byte ", wrong.first - out.begin(),
                                              " is ", *wrong.first, ", not ", *wrong.second));
          }
        }
        return absl::OkStatus();
      },
      absl::Minutes(1)));
}

TEST_CASE("a broadcast root runs calls ahead of ranks that have not started", "[slots]") {
  // The root's part ends once its data is in its slot: it finishes more broadcasts than one
  // before the other ranks start any (fewer than a rank's slots), and they then read every one.
  // A root that waited for a peer would wait here until its timeout.
  constexpr int kAhead = SharedSlots::kDepth - 1;
  std::atomic<bool> root_done{false};
  CommunicatorOptions options;
  options.timeout = absl::Seconds(20);
  CheckAll(RunOnThreadsAll(
      kTransport, 3,
      [&](Communicator& comm) -> absl::Status {
        CollectiveOptions named;
        named.algorithm = "shared_slots";
        if (comm.rank() != 0) {
          const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
          while (!root_done.load()) {
            if (std::chrono::steady_clock::now() > give_up) {
              return InternalError("the root did not finish its broadcasts alone");
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        }
        for (int call = 0; call < kAhead; ++call) {
          int64_t value = comm.rank() == 0 ? 100 + call : -1;
          CHORUS_RETURN_IF_ERROR(
              comm.Broadcast(&value, &value, 1, DataType::kInt64, /*root=*/0, named));
          CHORUS_RETURN_IF_ERROR(
              Expect(value == 100 + call, absl::StrCat("call ", call, ": ", value)));
        }
        if (comm.rank() == 0) root_done.store(true);
        return SumCalls(comm, 2);
      },
      absl::Minutes(1), options));
}

TEST_CASE("a disagreement only a broadcast root's check sees fails the next call", "[slots]") {
  // Named by their places on the header ring, whose successor checks each rank's header: the
  // first and second broadcast from root `first`, the third from root `third`. The second
  // reads the first's slot and agrees; the roots read none, and each leaves its check of its
  // predecessor's header to its next call, since they run in turn: first, then third (first's
  // predecessor), then second (third's predecessor). Every broadcast succeeds; the roots' next
  // call, an allreduce over messages, must fail with the disagreement instead of succeeding,
  // and so must the second's allreduce or, where its part was done before the news came, the
  // barrier after it.
  const HeaderRing ring(3);
  const int first = ring.RankAt(0), third = ring.RankAt(2);  // the second: the other rank
  std::atomic<int> finished{-1};  // the last rank whose broadcast returned
  const std::vector<absl::Status> statuses = RunOnThreadsAll(
      kTransport, 3,
      [&](Communicator& comm) -> absl::Status {
        const int rank = comm.rank();
        const int after = rank == first ? -1 : rank == third ? first : third;
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (finished.load() != after) {
          if (std::chrono::steady_clock::now() > give_up) {
            return InternalError(absl::StrCat("rank ", after, " did not finish its broadcast"));
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        int64_t value = rank;
        const absl::Status broadcast = comm.Broadcast(&value, &value, 1, DataType::kInt64,
                                                      /*root=*/rank == third ? third : first);
        finished.store(rank);
        CHORUS_RETURN_IF_ERROR(broadcast);
        CollectiveOptions ring_algorithm;
        ring_algorithm.algorithm = "ring";
        std::vector<int64_t> values(64, rank);
        CHORUS_RETURN_IF_ERROR(comm.AllReduce(values.data(), values.data(), values.size(),
                                              DataType::kInt64, ReduceOp::kSum, ring_algorithm));
        return comm.Barrier();
      },
      absl::Minutes(1));
  const std::string one_way = absl::StrCat("root ", first, " vs ", third);
  const std::string other_way = absl::StrCat("root ", third, " vs ", first);
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].ToString());
    CHECK(GetErrorKind(statuses[rank]) == ErrorKind::kMismatch);
    CHECK(absl::StrContains(statuses[rank].message(), "allreduce #1 (ring"));
    CHECK(absl::StrContains(statuses[rank].message(), "earlier, broadcast #0"));
    CHECK((absl::StrContains(statuses[rank].message(), one_way) ||
           absl::StrContains(statuses[rank].message(), other_way)));
  }
}

TEST_CASE("calls eight and more apart run at once on one rank", "[slots]") {
  // Enough workers that asynchronous calls #0..#19 and the blocking #20 all run at once: calls
  // that share a slot index must still take it in order on every rank.
  CommunicatorOptions options;
  options.worker_threads = 24;
  CheckAll(RunOnThreadsAll(
      kTransport, 2,
      [&](Communicator& comm) -> absl::Status {
        constexpr int kAsync = 20;
        std::vector<int64_t> values(kAsync + 1);
        std::vector<WorkPtr> works;
        for (int call = 0; call < kAsync; ++call) {
          values[call] = comm.rank() * 100 + call;
          works.push_back(comm.AllReduceAsync(&values[call], &values[call], 1, DataType::kInt64,
                                              ReduceOp::kSum));
        }
        values[kAsync] = comm.rank() * 100 + kAsync;
        CHORUS_RETURN_IF_ERROR(
            comm.AllReduce(&values[kAsync], &values[kAsync], 1, DataType::kInt64, ReduceOp::kSum));
        for (const WorkPtr& work : works) CHORUS_RETURN_IF_ERROR(work->Wait());
        for (int call = 0; call <= kAsync; ++call) {
          CHORUS_RETURN_IF_ERROR(Expect(values[call] == 100 + 2 * call,
                                        absl::StrCat("call ", call, ": ", values[call])));
        }
        return absl::OkStatus();
      },
      absl::Minutes(1), options));
}

TEST_CASE("a call aborted before it starts leaves the communicator working", "[slots]") {
  // One worker: the second asynchronous call waits in the queue behind the first, which waits
  // for the late rank 1, and is aborted there.
  CommunicatorOptions options;
  options.worker_threads = 1;
  CheckAll(RunOnThreadsAll(
      kTransport, 2,
      [&](Communicator& comm) -> absl::Status {
        int64_t first = comm.rank() + 1;
        int64_t second = comm.rank() + 1;
        if (comm.rank() == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          CHORUS_RETURN_IF_ERROR(
              comm.AllReduce(&first, &first, 1, DataType::kInt64, ReduceOp::kSum));
          CollectiveOptions short_wait;
          short_wait.timeout = absl::Milliseconds(200);
          const absl::Status alone =
              comm.AllReduce(&second, &second, 1, DataType::kInt64, ReduceOp::kSum, short_wait);
          CHORUS_RETURN_IF_ERROR(
              Expect(GetErrorKind(alone) == ErrorKind::kDeadlineExceeded, alone.ToString()));
        } else {
          WorkPtr running =
              comm.AllReduceAsync(&first, &first, 1, DataType::kInt64, ReduceOp::kSum);
          WorkPtr queued =
              comm.AllReduceAsync(&second, &second, 1, DataType::kInt64, ReduceOp::kSum);
          queued->Abort();
          const absl::Status aborted = queued->Wait();
          CHORUS_RETURN_IF_ERROR(Expect(absl::StrContains(aborted.message(), "before it started"),
                                        aborted.ToString()));
          CHORUS_RETURN_IF_ERROR(running->Wait());
        }
        CHORUS_RETURN_IF_ERROR(Expect(first == 3, absl::StrCat("sum ", first)));
        return SumCalls(comm, kManyCalls);
      },
      absl::Minutes(1), options));
}

// More elements than the shared buffers hold: a call of this many chooses messages.
constexpr size_t kBeyondBuffers = kSharedBufferPayloadBytes / sizeof(float) + 1;

// Runs `call` on 3 ranks, on `count` floats on ranks 0 and 1 and on kBeyondBuffers on rank 2,
// which so runs it over messages; checks that every rank fails promptly with a MismatchError and
// returns the errors.
std::vector<absl::Status> RankTwoOnMessages(
    size_t count, const std::function<absl::Status(Communicator&, float*, size_t)>& call) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<absl::Status> statuses = RunOnThreadsAll(
      kTransport, 3,
      [&](Communicator& comm) -> absl::Status {
        std::vector<float> data(kBeyondBuffers, 1.0f);
        return call(comm, data.data(), comm.rank() == 2 ? kBeyondBuffers : count);
      },
      absl::Minutes(1));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].ToString());
    CHECK(GetErrorKind(statuses[rank]) == ErrorKind::kMismatch);
    CHECK(absl::StrContains(statuses[rank].message(), "called"));
  }
  return statuses;
}

TEST_CASE("a rank that runs the call with messages is a mismatch on every rank", "[slots]") {
  // 2000 floats fit the buffers.
  const std::vector<absl::Status> statuses =
      RankTwoOnMessages(2000, [](Communicator& comm, float* data, size_t count) {
        return comm.AllReduce(data, data, count, DataType::kFloat32, ReduceOp::kSum);
      });
  for (const absl::Status& status : statuses) {
    INFO(status.ToString());
    CHECK(absl::StrContains(status.message(), absl::StrCat("count 2000 vs ", kBeyondBuffers)));
  }
}

TEST_CASE("a broadcast root's ring predecessor on messages is a mismatch on every rank",
          "[slots]") {
  // Rank 2 runs the call over messages where the others use a slot (500 floats: 2000 bytes),
  // and the root is its successor on the header ring. Only the root reads rank 2's header; it
  // leaves that check to its next call, which finds rank 2's header message.
  const int root = HeaderRing(3).Next(2);
  const std::vector<absl::Status> statuses =
      RankTwoOnMessages(500, [root](Communicator& comm, float* data, size_t count) {
        absl::Status status = comm.Broadcast(data, data, count, DataType::kFloat32, root);
        if (status.ok()) status = comm.Barrier();
        return status;
      });
  INFO(statuses[root].ToString());
  CHECK(absl::StrContains(statuses[root].message(), "earlier, broadcast #0"));
  CHECK(absl::StrContains(statuses[root].message(), "chose messages"));
}

TEST_CASE("ranks that disagree on the op fail with both views", "[slots]") {
  const std::vector<absl::Status> statuses = RunOnThreadsAll(
      kTransport, 2,
      [&](Communicator& comm) -> absl::Status {
        float value = 1.0f;
        return comm.AllReduce(&value, &value, 1, DataType::kFloat32,
                              comm.rank() == 0 ? ReduceOp::kSum : ReduceOp::kMax);
      },
      absl::Minutes(1));
  for (const absl::Status& status : statuses) {
    INFO(status.ToString());
    CHECK(GetErrorKind(status) == ErrorKind::kMismatch);
    CHECK((absl::StrContains(status.message(), "op sum vs max") ||
           absl::StrContains(status.message(), "op max vs sum")));
  }
}

// Rank 1's part when rank 0 gives up on call #0: it arrives `late` and still completes the
// call, since rank 0 had published its slot.
absl::Status LateAllReduce(Communicator& comm, std::chrono::milliseconds late) {
  std::this_thread::sleep_for(late);
  int64_t value = comm.rank() + 1;
  CHORUS_RETURN_IF_ERROR(comm.AllReduce(&value, &value, 1, DataType::kInt64, ReduceOp::kSum));
  return Expect(value == 3, absl::StrCat("sum ", value));
}

TEST_CASE("a timed-out call leaves the communicator working", "[slots]") {
  CheckAll(RunOnThreadsAll(
      kTransport, 2,
      [&](Communicator& comm) -> absl::Status {
        if (comm.rank() == 1) {
          CHORUS_RETURN_IF_ERROR(LateAllReduce(comm, std::chrono::milliseconds(400)));
        } else {
          int64_t value = comm.rank() + 1;
          CollectiveOptions options;
          options.timeout = absl::Milliseconds(100);
          const absl::Status timed_out =
              comm.AllReduce(&value, &value, 1, DataType::kInt64, ReduceOp::kSum, options);
          CHORUS_RETURN_IF_ERROR(
              Expect(GetErrorKind(timed_out) == ErrorKind::kDeadlineExceeded &&
                         absl::StrContains(timed_out.message(), "allreduce #0") &&
                         absl::StrContains(timed_out.message(), "rank 1's shared slot"),
                     timed_out.ToString()));
          CHORUS_RETURN_IF_ERROR(Expect(ErrorPeerRank(timed_out) == 1, timed_out.ToString()));
        }
        // Rank 1's slot of call #0 is read again only after rank 0 has paid its read of it.
        return SumCalls(comm, kManyCalls);
      },
      absl::Minutes(1)));
}

// The line of `dump` that holds `part`, or "" if none does.
std::string LineWith(const std::string& dump, absl::string_view part) {
  for (absl::string_view line : absl::StrSplit(dump, '\n')) {
    if (absl::StrContains(line, part)) return std::string(line);
  }
  return "";
}

// The span a dump line gives after `prefix` ("12 us", "3.25 ms", "1.50 s"), in milliseconds;
// nullopt if the line has no such span right after `prefix`.
std::optional<double> MillisAfter(absl::string_view line, absl::string_view prefix) {
  const size_t at = line.find(prefix);
  if (at == absl::string_view::npos) return std::nullopt;
  const std::vector<absl::string_view> words =
      absl::StrSplit(line.substr(at + prefix.size()), absl::MaxSplits(' ', 2));
  double value = 0;
  if (words.size() < 2 || !absl::SimpleAtod(words[0], &value)) return std::nullopt;
  const absl::string_view unit = absl::StripSuffix(words[1], ",");
  if (unit == "us") return value / 1000;
  if (unit == "ms") return value;
  if (unit == "s") return value * 1000;
  return std::nullopt;
}

// A call on the slots that succeeds notes its end in its flight record by the coarse clock: its
// line says how long it took to within that clock's tick. Failures, calls over messages and
// every deadline keep the precise clock.
TEST_CASE("a call on the slots notes its end by the coarse clock", "[slots]") {
  CheckAll(RunOnThreadsAll(
      kTransport, 2,
      [&](Communicator& comm) -> absl::Status {
        CHORUS_RETURN_IF_ERROR(SumCalls(comm, 2));
        CollectiveOptions ring;
        ring.algorithm = "ring";
        std::vector<float> large(1000, 1.0f);
        CHORUS_RETURN_IF_ERROR(comm.AllReduce(large.data(), large.data(), large.size(),
                                              DataType::kFloat32, ReduceOp::kSum, ring));
        std::string dump = comm.FlightRecorderDump();
        const double tick_ms =
            std::chrono::duration<double, std::milli>(Deadline::CoarseTick()).count();
        // Under a tick, the usual case; a call held up longer (a loaded machine) says about how
        // long, never less than a tick.
        const std::string on_slots = LineWith(dump, "allreduce #1 (shared_slots");
        const std::optional<double> about = MillisAfter(on_slots, "COMPLETED in about ");
        CHORUS_RETURN_IF_ERROR(Expect(
            absl::StrContains(on_slots, absl::StrFormat("COMPLETED in under %.2f ms", tick_ms)) ||
                (about && *about >= tick_ms),
            dump));
        const std::string on_messages = LineWith(dump, "allreduce #2 (ring");
        CHORUS_RETURN_IF_ERROR(Expect(absl::StrContains(on_messages, "COMPLETED in ") &&
                                          !absl::StrContains(on_messages, "under") &&
                                          !absl::StrContains(on_messages, "about"),
                                      dump));
        // Rank 1 pays the read of rank 0's timed-out call, then meets it.
        if (comm.rank() == 1) {
          CHORUS_RETURN_IF_ERROR(LateAllReduce(comm, std::chrono::milliseconds(300)));
          return SumCalls(comm, 2);
        }
        int64_t value = 1;
        CollectiveOptions options;
        options.timeout = absl::Milliseconds(20);
        const auto start = std::chrono::steady_clock::now();
        const absl::Status timed_out =
            comm.AllReduce(&value, &value, 1, DataType::kInt64, ReduceOp::kSum, options);
        const auto took = std::chrono::steady_clock::now() - start;
        CHORUS_RETURN_IF_ERROR(
            Expect(GetErrorKind(timed_out) == ErrorKind::kDeadlineExceeded, timed_out.ToString()));
        CHORUS_RETURN_IF_ERROR(
            Expect(took >= std::chrono::milliseconds(20),
                   "a 20 ms timeout ended after " + absl::FormatDuration(absl::FromChrono(took))));
        // A failure's end is precise: no qualifier, and no less than the timeout.
        dump = comm.FlightRecorderDump();
        const std::optional<double> failed_after =
            MillisAfter(LineWith(dump, "allreduce #3 (shared_slots"), "FAILED after ");
        CHORUS_RETURN_IF_ERROR(Expect(failed_after && *failed_after >= 20, dump));
        return SumCalls(comm, 2);
      },
      absl::Minutes(1)));
}

TEST_CASE("a rank that gives up on a buffered call fails its peers at once", "[slots]") {
  // Rank 0 publishes its input and times out before rank 1 arrives: rank 1 reads that input and
  // reduces its own piece, but rank 0's piece will never come. (The ranks are threads: rank 1
  // starts its call once rank 0 has given up, however late its thread runs.)
  constexpr size_t kCount = 2000;  // int64: 16000 bytes
  std::atomic<bool> rank0_gave_up{false};
  CheckAll(RunOnThreadsAll(
      kTransport, 2,
      [&](Communicator& comm) -> absl::Status {
        std::vector<int64_t> values(kCount, comm.rank() + 1);
        CollectiveOptions options;
        options.algorithm = "shared_slots";
        if (comm.rank() == 0) {
          options.timeout = absl::Milliseconds(100);
          const absl::Status timed_out = comm.AllReduce(values.data(), values.data(), kCount,
                                                        DataType::kInt64, ReduceOp::kSum, options);
          rank0_gave_up.store(true);
          CHORUS_RETURN_IF_ERROR(Expect(GetErrorKind(timed_out) == ErrorKind::kDeadlineExceeded,
                                        timed_out.ToString()));
        } else {
          for (int waits = 0; !rank0_gave_up.load() && waits < 1000; ++waits) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
          CHORUS_RETURN_IF_ERROR(Expect(rank0_gave_up.load(), "rank 0 never gave up"));
          const auto start = std::chrono::steady_clock::now();
          const absl::Status gave_up = comm.AllReduce(values.data(), values.data(), kCount,
                                                      DataType::kInt64, ReduceOp::kSum, options);
          const auto took = std::chrono::steady_clock::now() - start;
          CHORUS_RETURN_IF_ERROR(
              Expect(GetErrorKind(gave_up) == ErrorKind::kAborted &&
                         absl::StrContains(gave_up.message(), "allreduce #0") &&
                         absl::StrContains(gave_up.message(), "rank 0 gave up on this collective"),
                     gave_up.ToString()));
          CHORUS_RETURN_IF_ERROR(Expect(ErrorPeerRank(gave_up) == 0, gave_up.ToString()));
          CHORUS_RETURN_IF_ERROR(Expect(took < std::chrono::seconds(5), "noticed after 5 s"));
        }
        // Each rank's buffer of call #0 is filled again only after the other has counted its
        // read of it (rank 1 read rank 0's; rank 0 owes its read of rank 1's).
        for (int call = 1; call <= 10; ++call) {
          CHORUS_RETURN_IF_ERROR(BufferedSum(comm, kCount, call));
        }
        return SumCalls(comm, kManyCalls);
      },
      absl::Minutes(1)));
}

TEST_CASE("an aborted call leaves the communicator working", "[slots]") {
  CheckAll(RunOnThreadsAll(
      kTransport, 2,
      [&](Communicator& comm) -> absl::Status {
        if (comm.rank() == 1) {
          CHORUS_RETURN_IF_ERROR(LateAllReduce(comm, std::chrono::milliseconds(300)));
        } else {
          int64_t value = comm.rank() + 1;
          WorkPtr work = comm.AllReduceAsync(&value, &value, 1, DataType::kInt64, ReduceOp::kSum);
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          work->Abort();
          const absl::Status aborted = work->Wait();
          CHORUS_RETURN_IF_ERROR(
              Expect(GetErrorKind(aborted) == ErrorKind::kAborted, aborted.ToString()));
        }
        return SumCalls(comm, kManyCalls);
      },
      absl::Minutes(1)));
}

TEST_CASE("sub-communicators run on messages while their parent keeps the slots", "[slots]") {
  CheckAll(RunOnThreadsAll(
      kTransport, 4,
      [&](Communicator& comm) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> half,
                                comm.Split(comm.rank() % 2, comm.rank()));
        CHORUS_ASSIGN_OR_RETURN(const std::string sub,
                                half->ChooseAlgorithm(CollectiveKind::kAllReduce, 4));
        CHORUS_ASSIGN_OR_RETURN(const std::string parent,
                                comm.ChooseAlgorithm(CollectiveKind::kAllReduce, 4));
        CHORUS_RETURN_IF_ERROR(Expect(sub != "shared_slots" && parent == "shared_slots",
                                      "sub-communicator " + sub + ", parent " + parent));
        CHORUS_RETURN_IF_ERROR(SumCalls(*half, 10));
        return SumCalls(comm, 10);
      },
      absl::Minutes(1)));
}

TEST_CASE("CommunicatorOptions::shared_slots = false keeps small calls on messages", "[slots]") {
  CommunicatorOptions options;
  options.shared_slots = false;
  CheckAll(RunOnThreadsAll(
      kTransport, 2,
      [&](Communicator& comm) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(const std::string chosen,
                                comm.ChooseAlgorithm(CollectiveKind::kAllReduce, 4));
        CHORUS_RETURN_IF_ERROR(Expect(chosen != "shared_slots", "chose " + chosen));
        CollectiveOptions named;
        named.algorithm = "shared_slots";
        float value = 1.0f;
        CHORUS_RETURN_IF_ERROR(ExpectInvalidArgument(
            comm.AllReduce(&value, &value, 1, DataType::kFloat32, ReduceOp::kSum, named),
            "needs ranks that share memory"));
        return SumCalls(comm, 4);
      },
      absl::Minutes(1), options));
}

TEST_CASE("a rule that names the slots for a call they cannot carry is refused", "[slots]") {
  CommunicatorOptions options;
  options.algorithm_rules = "allreduce:0-inf=shared_slots";
  CheckAll(RunOnThreadsAll(
      kTransport, 2,
      [&](Communicator& comm) -> absl::Status {
        std::vector<uint8_t> too_large(kSharedBufferPayloadBytes + 1);
        CHORUS_RETURN_IF_ERROR(ExpectInvalidArgument(
            comm.AllReduce(too_large.data(), too_large.data(), too_large.size(), DataType::kUint8,
                           ReduceOp::kSum),
            "carries at most"));
        // Refused before it was numbered, on both ranks: the communicator still works.
        CHORUS_RETURN_IF_ERROR(BufferedSum(comm, 3000, 0));
        return SumCalls(comm, 4);
      },
      absl::Minutes(1), options));
}

#ifdef CHORUS_TEST_PROCESSES
TEST_CASE("ranks as processes: every case, and many calls", "[slots]") {
  const absl::Status status = RunOnProcesses(
      kTransport, 4,
      [&](Communicator& comm) -> absl::Status {
        CHORUS_RETURN_IF_ERROR(RunCases(comm, BuildCases(SlotMatrix({""}), 4)));
        CHORUS_RETURN_IF_ERROR(RunCases(comm, BuildCases(BufferedMatrix(), 4)));
        for (int call = 0; call < 20; ++call) {
          CHORUS_RETURN_IF_ERROR(BufferedSum(comm, kLargestBufferedCount - call, call));
        }
        return SumCalls(comm, 200);
      },
      absl::Minutes(2));
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("a peer process that dies is named promptly", "[slots]") {
  const absl::Status status = RunOnProcesses(
      kTransport, 3,
      [&](Communicator& comm) -> absl::Status {
        CHORUS_RETURN_IF_ERROR(SumCalls(comm, 3));
        if (comm.rank() == 2) _exit(0);  // dies without a word
        const auto start = std::chrono::steady_clock::now();
        int64_t value = 1;
        const absl::Status lost =
            comm.AllReduce(&value, &value, 1, DataType::kInt64, ReduceOp::kSum);
        const auto took = std::chrono::steady_clock::now() - start;
        CHORUS_RETURN_IF_ERROR(
            Expect(GetErrorKind(lost) == ErrorKind::kPeerUnavailable, lost.ToString()));
        CHORUS_RETURN_IF_ERROR(Expect(ErrorPeerRank(lost) == 2, lost.ToString()));
        return Expect(took < std::chrono::seconds(5), "noticed after 5 s");
      },
      absl::Minutes(1));
  INFO(status.ToString());
  CHECK(status.ok());
}
#endif

}  // namespace
}  // namespace chorus::testing
