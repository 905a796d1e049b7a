// The collective context's piggyback protocol (collectives/engine/context.h), driven directly on
// a real mesh: receives posted in another order than the sends, a receive posted after the
// header was handled, two messages with the same step, a rank that only receives (its owed
// header must still go out), cancellation of a receive whose data rides in the header, a
// header held for a later message to the ring successor (riding on it, or going out alone once
// a wait blocks), the messages recursive doubling and the dissemination barrier send, and a
// broadcast root at the first position of the header ring, which runs a bounded number of
// calls ahead of its predecessor and checks that rank's headers later.
#include "chorus/collectives/engine/context.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "chorus/collectives/algorithms/algorithms.h"
#include "chorus/collectives/engine/comm_state.h"
#include "chorus/collectives/engine/fold.h"
#include "chorus/collectives/engine/header.h"
#include "chorus/collectives/engine/header_ring.h"
#include "chorus/collectives/engine/tag.h"
#include "chorus/collectives/select/algorithm_table.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/memory_store.h"
#include "chorus/rendezvous/prefix_store.h"
#include "tests/collectives/test_transport.h"
#include "tests/harness/multirank.h"

namespace chorus::testing {
namespace {

const TransportKind kTransport = kTestTransport;

std::string FreshName() {
  static std::atomic<int> counter{0};
  return absl::StrCat("context", counter.fetch_add(1));
}

// One rank's communicator state over a fresh mesh of the test's transport.
struct Rank {
  std::unique_ptr<Device> device;
  std::unique_ptr<CommState> state;
};

absl::StatusOr<Rank> MakeRank(Store& store, const std::string& name, int rank, int size) {
  Rank made;
  CHORUS_ASSIGN_OR_RETURN(made.device, MakeDevice(kTransport, rank));
  auto scoped = std::make_unique<PrefixStore>(name, store);
  PrefixStore mesh_store("mesh", *scoped);
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Mesh> mesh,
                          made.device->CreateMesh(mesh_store, rank, size, MeshOptions{},
                                                  Deadline::After(absl::Seconds(30))));
  CommTuning tuning;
  tuning.eager_sends = EagerSendsFor(made.device->Links());
  made.state = std::make_unique<CommState>(name, rank, size, std::move(scoped), std::move(mesh),
                                           tuning, Topology::Flat(size), /*trace=*/nullptr);
  return made;
}

using ContextBody = std::function<absl::Status(CollectiveContext& ctx, int rank)>;

// Runs `body` on `size` ranks (threads) over one mesh, `calls` times on each, every time inside
// a fresh collective context (sequence number `call`) for a call of `shape` run by `algorithm`,
// then Finish() and `finished` (when given); returns the first error.
absl::Status RunContextsOf(
    int size, const CollectiveArgs& shape, AlgorithmId algorithm, int calls,
    const std::function<absl::Status(CollectiveContext& ctx, int rank, int call)>& body,
    const std::function<void(const CollectiveContext& ctx, int rank)>& finished = nullptr) {
  MemoryStore store;
  const std::string name = FreshName();
  const std::vector<absl::Status> statuses = RunRanksAsThreads(
      size,
      [&](int rank) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(Rank made, MakeRank(store, name, rank, size));
        for (int call = 0; call < calls; ++call) {
          const CollectiveHeader header = CollectiveHeader::For(
              shape, algorithm, /*sequence=*/static_cast<uint32_t>(call), size);
          CollectiveContext ctx(*made.state, shape, header, Deadline::After(absl::Seconds(20)));
          const AlgorithmEntry* entry = FindAlgorithm(shape.kind, algorithm);
          ctx.Start(entry != nullptr ? entry->feeder : nullptr);
          CHORUS_RETURN_IF_ERROR(body(ctx, rank, call));
          CHORUS_RETURN_IF_ERROR(ctx.Finish());
          if (finished) finished(ctx, rank);
        }
        return absl::OkStatus();
      },
      absl::Minutes(1));
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    if (!statuses[rank].ok()) return Annotate(statuses[rank], absl::StrCat("rank ", rank));
  }
  return absl::OkStatus();
}

// Runs `body` on two ranks, once, inside contexts whose header has no counts (lengths are
// checked).
absl::Status RunContexts(const ContextBody& body) {
  CollectiveArgs shape;
  shape.kind = CollectiveKind::kAllToAllV;
  shape.type = DataType::kInt32;
  return RunContextsOf(2, shape, AlgorithmId::kPairwise, /*calls=*/1,
                       [&](CollectiveContext& ctx, int rank, int) { return body(ctx, rank); });
}

std::vector<int32_t> Pattern(int32_t base, size_t count) {
  std::vector<int32_t> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = base + static_cast<int32_t>(i);
  return values;
}

absl::Status ExpectEqual(const std::vector<int32_t>& got, const std::vector<int32_t>& want,
                         const std::string& what) {
  return Expect(got == want, absl::StrCat(what, ": the received values differ"));
}

// The shared slots' table entry serves allreduce, broadcast and barrier; the selector never
// hands it another collective, and one that reaches it anyway fails with a clear error (and
// breaks the communicator, so that no peer waits for this rank).
TEST_CASE("the shared_slots entry refuses a collective it does not run", "[context]") {
  const absl::Status status = RunContexts(
      [](CollectiveContext& ctx, int) -> absl::Status { return SharedSlotsCall(ctx, ctx.args()); });
  INFO(status.ToString());
  CHECK(GetErrorKind(status) == ErrorKind::kInvalidArgument);
  CHECK(absl::StrContains(status.message(), "alltoallv #0"));
  CHECK(absl::StrContains(status.message(),
                          "the shared_slots algorithm runs allreduce, broadcast and barrier, not "
                          "alltoallv; name another algorithm"));
}

TEST_CASE("receives posted in another order than the sends get the right data", "[context]") {
  const absl::Status status = RunContexts([](CollectiveContext& ctx, int rank) -> absl::Status {
    const std::vector<int32_t> three = Pattern(300, 5), five = Pattern(500, 7);
    if (rank == 0) {
      // Step 3 is the first message: it rides in the header; step 5 goes on its own.
      const Transfer sends[] = {ctx.Send(1, 3, three.data(), three.size() * 4),
                                ctx.Send(1, 5, five.data(), five.size() * 4)};
      return ctx.WaitAll(sends);
    }
    std::vector<int32_t> got_five(7, -1), got_three(5, -1);
    const Transfer five_recv = ctx.Recv(0, 5, got_five.data(), got_five.size() * 4);
    const Transfer three_recv = ctx.Recv(0, 3, got_three.data(), got_three.size() * 4);
    CHORUS_RETURN_IF_ERROR(ctx.Wait(five_recv));
    CHORUS_RETURN_IF_ERROR(ctx.Wait(three_recv));
    CHORUS_RETURN_IF_ERROR(ExpectEqual(got_five, five, "step 5"));
    return ExpectEqual(got_three, three, "step 3");
  });
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("a receive posted after the header arrived takes the data it carried", "[context]") {
  const absl::Status status = RunContexts([](CollectiveContext& ctx, int rank) -> absl::Status {
    const std::vector<int32_t> three = Pattern(300, 4), seven = Pattern(700, 4);
    if (rank == 0) {
      const Transfer sends[] = {ctx.Send(1, 3, three.data(), three.size() * 4),
                                ctx.Send(1, 7, seven.data(), seven.size() * 4)};
      return ctx.WaitAll(sends);
    }
    // Step 7 first: waiting for it handles the header (which carries step 3) and posts the
    // transport receive for step 7; step 3's receive comes only afterwards.
    std::vector<int32_t> got_seven(4, -1), got_three(4, -1);
    CHORUS_RETURN_IF_ERROR(ctx.Wait(ctx.Recv(0, 7, got_seven.data(), got_seven.size() * 4)));
    const Transfer late = ctx.Recv(0, 3, got_three.data(), got_three.size() * 4);
    CHORUS_RETURN_IF_ERROR(Expect(ctx.Ready(late), "the late receive is satisfied at once"));
    CHORUS_RETURN_IF_ERROR(ctx.Wait(late));
    CHORUS_RETURN_IF_ERROR(ExpectEqual(got_seven, seven, "step 7"));
    return ExpectEqual(got_three, three, "step 3");
  });
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("two messages with the same step arrive in order", "[context]") {
  const absl::Status status = RunContexts([](CollectiveContext& ctx, int rank) -> absl::Status {
    const std::vector<int32_t> first = Pattern(100, 3), second = Pattern(200, 3);
    if (rank == 0) {
      const Transfer sends[] = {ctx.Send(1, 2, first.data(), first.size() * 4),
                                ctx.Send(1, 2, second.data(), second.size() * 4)};
      return ctx.WaitAll(sends);
    }
    std::vector<int32_t> got_first(3, -1), got_second(3, -1);
    const Transfer recvs[] = {ctx.Recv(0, 2, got_first.data(), got_first.size() * 4),
                              ctx.Recv(0, 2, got_second.data(), got_second.size() * 4)};
    CHORUS_RETURN_IF_ERROR(ctx.WaitAll(recvs));
    CHORUS_RETURN_IF_ERROR(ExpectEqual(got_first, first, "first"));
    return ExpectEqual(got_second, second, "second");
  });
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("a rank sends its owed header before it blocks", "[context]") {
  // Rank 0 owes rank 1 (its ring successor) its header and sends it no data. Rank 1 sends
  // its data only once that header has arrived, while rank 0 blocks waiting for that data: a
  // rank that kept its owed header until Finish would leave both waiting until the deadline.
  const absl::Status status = RunContexts([](CollectiveContext& ctx, int rank) -> absl::Status {
    const std::vector<int32_t> data = Pattern(42, 2);
    if (rank == 1) {
      const auto until = absl::Now() + absl::Seconds(10);
      while (absl::StrContains(ctx.DescribeProgress(), "SILENT") && absl::Now() < until) {
        absl::SleepFor(absl::Milliseconds(1));
      }
      CHORUS_RETURN_IF_ERROR(Expect(!absl::StrContains(ctx.DescribeProgress(), "SILENT"),
                                    "rank 0's header never arrived while it waited"));
      return ctx.Wait(ctx.Send(0, 0, data.data(), data.size() * 4));
    }
    std::vector<int32_t> got(2, -1);
    CHORUS_RETURN_IF_ERROR(ctx.Wait(ctx.Recv(1, 0, got.data(), got.size() * 4)));
    return ExpectEqual(got, data, "step 0");
  });
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("a cancelled receive never gets the data that rode in the header", "[context]") {
  MemoryStore store;
  const std::string name = FreshName();
  constexpr int32_t kUntouched = -5;
  const std::vector<absl::Status> statuses = RunRanksAsThreads(
      2,
      [&](int rank) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(Rank made, MakeRank(store, name, rank, 2));
        CollectiveArgs args;
        args.kind = CollectiveKind::kAllToAllV;
        args.type = DataType::kInt32;
        const CollectiveHeader header = CollectiveHeader::For(args, AlgorithmId::kPairwise, 0, 2);
        CollectiveContext ctx(*made.state, args, header, Deadline::After(absl::Seconds(20)));
        ctx.Start();
        const std::vector<int32_t> data = Pattern(7, 4);
        if (rank == 0) return ctx.Wait(ctx.Send(1, 0, data.data(), data.size() * 4));
        std::vector<int32_t> got(4, kUntouched);
        const Transfer recv = ctx.Recv(0, 0, got.data(), got.size() * 4);
        // Let the header (with the data) arrive, then cancel before anything waits on it.
        absl::SleepFor(absl::Milliseconds(200));
        ctx.Cancel();
        const absl::Status waited = ctx.Wait(recv);
        CHORUS_RETURN_IF_ERROR(Expect(GetErrorKind(waited) == ErrorKind::kAborted,
                                      absl::StrCat("wait after cancel: ", waited.ToString())));
        for (int32_t value : got) {
          CHORUS_RETURN_IF_ERROR(Expect(value == kUntouched, "the cancelled receive was written"));
        }
        return absl::OkStatus();
      },
      absl::Minutes(1));
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].ToString());
    CHECK(statuses[rank].ok());
  }
}

// The held-header cases on two ranks: rank 1 asks (step 0) and checks rank 0's reply (step 1);
// rank 0 holds the header it owes rank 1, its ring successor, for that reply, gets the ask
// through `await`, and replies.
absl::Status Ask(CollectiveContext& ctx) {
  const std::vector<int32_t> ask = Pattern(10, 2);
  std::vector<int32_t> got(2, -1);
  const Transfer transfers[] = {ctx.Send(0, 0, ask.data(), ask.size() * 4),
                                ctx.Recv(0, 1, got.data(), got.size() * 4)};
  CHORUS_RETURN_IF_ERROR(ctx.WaitAll(transfers));
  return ExpectEqual(got, Pattern(20, 2), "the reply");
}

absl::Status Reply(CollectiveContext& ctx,
                   const std::function<absl::Status(const Transfer& asked)>& await) {
  const int successor[] = {1};
  ctx.WillSendTo(successor);
  std::vector<int32_t> got(2, -1);
  CHORUS_RETURN_IF_ERROR(await(ctx.Recv(1, 0, got.data(), got.size() * 4)));
  CHORUS_RETURN_IF_ERROR(ExpectEqual(got, Pattern(10, 2), "the ask"));
  const std::vector<int32_t> reply = Pattern(20, 2);
  return ctx.Wait(ctx.Send(1, 1, reply.data(), reply.size() * 4));
}

TEST_CASE("a header held for a data message to the ring successor rides on it", "[context]") {
  // Rank 0 polls for the ask (Ready would send an owed header that is not held), so its reply
  // carries the header: one message.
  const absl::Status status = RunContexts([](CollectiveContext& ctx, int rank) -> absl::Status {
    if (rank == 1) return Ask(ctx);
    CHORUS_RETURN_IF_ERROR(Reply(ctx, [&ctx](const Transfer& asked) {
      const auto until = absl::Now() + absl::Seconds(10);
      while (!ctx.Ready(asked) && absl::Now() < until) absl::SleepFor(absl::Microseconds(100));
      return ctx.Wait(asked);
    }));
    return Expect(ctx.messages_sent() == 1,
                  absl::StrCat(ctx.messages_sent(), " messages, not the reply alone"));
  });
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("a held header goes out on its own once a wait blocks", "[context]") {
  // Rank 1 asks only once rank 0's header has arrived, while rank 0 waits for the ask: rank 0
  // must send the header it holds for its reply alone while it waits.
  const absl::Status status = RunContexts([](CollectiveContext& ctx, int rank) -> absl::Status {
    if (rank == 0) {
      return Reply(ctx, [&ctx](const Transfer& asked) { return ctx.Wait(asked); });
    }
    const auto until = absl::Now() + absl::Seconds(10);
    while (absl::StrContains(ctx.DescribeProgress(), "SILENT") && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    CHORUS_RETURN_IF_ERROR(Expect(!absl::StrContains(ctx.DescribeProgress(), "SILENT"),
                                  "rank 0's held header never went out while it waited"));
    return Ask(ctx);
  });
  INFO(status.ToString());
  CHECK(status.ok());
}

// The fewest messages each of `size` ranks sent over kCountedCalls runs of `run` (a call of
// `shape` by `algorithm`): the count when no wait blocked long enough to send a held header on
// its own.
constexpr int kCountedCalls = 30;

std::vector<size_t> FewestMessages(int size, const CollectiveArgs& shape, AlgorithmId algorithm,
                                   AlgorithmFn run) {
  std::vector<size_t> fewest(size, SIZE_MAX);
  std::vector<int> calls_done(size, 0);
  std::atomic<int> ranks_done{0};
  const absl::Status status = RunContextsOf(
      size, shape, algorithm, kCountedCalls,
      [&](CollectiveContext& ctx, int rank, int) -> absl::Status {
        float value = static_cast<float>(rank + 1);
        CollectiveArgs args = shape;
        args.send = &value;
        args.recv = &value;
        CHORUS_RETURN_IF_ERROR(run(ctx, args));
        if (shape.kind != CollectiveKind::kAllReduce) return absl::OkStatus();
        const float sum = static_cast<float>(size * (size + 1) / 2);
        return Expect(value == sum, absl::StrCat("allreduce gave ", value, ", not ", sum));
      },
      [&](const CollectiveContext& ctx, int rank) {
        fewest[rank] = std::min(fewest[rank], ctx.messages_sent());
        if (++calls_done[rank] < kCountedCalls) return;
        // A rank keeps its mesh until every rank is done: the header across the ring's closing
        // edge may still be on its way to the first rank, which receives nothing else from it.
        ranks_done.fetch_add(1);
        const absl::Time give_up = absl::Now() + absl::Seconds(20);
        while (ranks_done.load() < size && absl::Now() < give_up) {
          absl::SleepFor(absl::Milliseconds(1));
        }
      });
  INFO(status.ToString());
  CHECK(status.ok());
  return fewest;
}

TEST_CASE("recursive doubling sends the ring header on its data", "[context]") {
  // Every rank's successor on the header ring is one of its partners, except a rank folded
  // away (a non-power-of-two count), whose header to its successor goes alone.
  CollectiveArgs shape;
  shape.kind = CollectiveKind::kAllReduce;
  shape.type = DataType::kFloat32;
  shape.op = ReduceOp::kSum;
  shape.count = 1;
  for (int size : {4, 6, 8}) {
    const Fold fold(size);
    const std::vector<size_t> fewest =
        FewestMessages(size, shape, AlgorithmId::kRecursiveDoubling, RecursiveDoublingAllReduce);
    for (int rank = 0; rank < size; ++rank) {
      INFO(size << " ranks, rank " << rank);
      const size_t alone = fold.ActiveIndex(rank) < 0 ? 1 : 0;
      CHECK(fewest[rank] == fold.Peers(rank).size() + alone);
    }
  }
}

TEST_CASE("a dissemination barrier sends the ring header on its first round", "[context]") {
  CollectiveArgs shape;
  shape.kind = CollectiveKind::kBarrier;
  for (int size : {3, 4, 8}) {
    const int rounds = size <= 4 ? 2 : 3;
    const std::vector<size_t> fewest =
        FewestMessages(size, shape, AlgorithmId::kDissemination, DisseminationBarrier);
    for (int rank = 0; rank < size; ++rank) {
      INFO(size << " ranks, rank " << rank);
      CHECK(fewest[rank] == static_cast<size_t>(rounds));
    }
  }
}

TEST_CASE("a small binomial broadcast sends headers only with its data", "[context]") {
  // The tree is built over ring positions, virtual rank v = position - root position: v's
  // children are v + 2^k below v's lowest set bit. A rank whose parent sits below it on the ring
  // checks the parent's header, which comes with the data, so its predecessor sends it none; a
  // rank whose parent sits above it (the root's, and the first position's when the root is not
  // there) gets its predecessor's header alone. The last position's header, across the ring's
  // closing edge, goes every call or, on a transport where the first position checks it in
  // later calls only, every kHeaderCheckInterval-th call: -1 below, 0 or 1 message.
  struct Case {
    int size;
    int root_position;
    std::vector<int> messages_by_position;
  };
  const std::vector<Case> cases = {
      {4, 0, {2, 0, 1, -1}},
      {4, 2, {1, 1, 2, -1}},  // position 1, a leaf, sends its header to the root alone
      {8, 0, {3, 0, 1, 0, 2, 0, 1, -1}},
      {8, 2, {1, 1, 3, 0, 1, 0, 2, -1}},
  };
  for (const Case& c : cases) {
    const HeaderRing ring(c.size);
    CollectiveArgs shape;
    shape.kind = CollectiveKind::kBroadcast;
    shape.type = DataType::kFloat32;
    shape.count = 1;
    shape.root = ring.RankAt(c.root_position);
    const std::vector<size_t> fewest =
        FewestMessages(c.size, shape, AlgorithmId::kBinomial, BinomialBroadcast);
    for (int position = 0; position < c.size; ++position) {
      INFO(c.size << " ranks, root at ring position " << c.root_position << ", position "
                  << position);
      const size_t sent = fewest[ring.RankAt(position)];
      const int expected = c.messages_by_position[position];
      if (expected < 0) {
        CHECK(sent <= 1);
      } else {
        CHECK(sent == static_cast<size_t>(expected));
      }
    }
  }
}

// A small broadcast (4 int32) from the rank at the first position of the header ring, two
// ranks: what the root does, and what the other rank does with the root's mesh.
CollectiveArgs SmallBroadcast() {
  CollectiveArgs shape;
  shape.kind = CollectiveKind::kBroadcast;
  shape.type = DataType::kInt32;
  shape.count = 4;
  shape.root = HeaderRing(2).RankAt(0);
  return shape;
}

// Waits until `flag` is set, at most `most`; whether it was.
bool AwaitFlag(const std::atomic<bool>& flag, absl::Duration most) {
  const absl::Time give_up = absl::Now() + most;
  while (!flag.load() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  return flag.load();
}

// Runs `calls` small broadcasts on the root, each with `deadline`, and returns the status of
// each until the first error; `other` runs on the other rank meanwhile, and may wait for
// `root_done`, set once the root's calls have returned.
std::vector<absl::Status> RootAhead(int calls, absl::Duration deadline,
                                    std::atomic<bool>& root_done,
                                    const std::function<absl::Status(Rank& made)>& other) {
  const CollectiveArgs shape = SmallBroadcast();
  MemoryStore store;
  const std::string name = FreshName();
  std::vector<absl::Status> root_calls;
  std::atomic<bool> other_done{false};
  const std::vector<absl::Status> statuses = RunRanksAsThreads(
      2,
      [&](int rank) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(Rank made, MakeRank(store, name, rank, 2));
        if (rank != shape.root) {
          const absl::Status status = other(made);
          other_done.store(true);
          return status;
        }
        std::vector<int32_t> data = Pattern(100, shape.count);
        CollectiveArgs args = shape;
        args.send = data.data();
        args.recv = data.data();
        for (int call = 0; call < calls; ++call) {
          const CollectiveHeader header =
              CollectiveHeader::For(shape, AlgorithmId::kBinomial, static_cast<uint32_t>(call), 2);
          CollectiveContext ctx(*made.state, args, header, Deadline::After(deadline));
          ctx.Start();
          absl::Status status = BinomialBroadcast(ctx, args);
          if (status.ok()) status = ctx.Finish();
          root_calls.push_back(status);
          if (!status.ok()) break;
        }
        root_done.store(true);
        // The root's mesh outlives the other rank's calls: closing its links while that rank's
        // messages arrive would reset them and drop what the root sent ahead (a rank that must
        // know its last sends arrived ends with a barrier; docs/transport-tcp.md).
        AwaitFlag(other_done, absl::Seconds(40));
        return absl::OkStatus();
      },
      absl::Minutes(1));
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].ToString());
    CHECK(statuses[rank].ok());
  }
  return root_calls;
}

// The root's calls up to its first header check (its kHeaderCheckInterval-th), which must stop
// there: every call before succeeded; returns the status of the one that checked.
absl::Status CallAfterInterval(const std::vector<absl::Status>& root) {
  constexpr size_t kInterval = CollectiveContext::kHeaderCheckInterval;
  REQUIRE(root.size() == kInterval + 1);
  for (size_t call = 0; call < kInterval; ++call) CHECK(root[call].ok());
  return root.back();
}

TEST_CASE("a broadcast root at the start of the header ring waits for no rank",
          "[context][run_ahead]") {
  // The other rank enters the calls only once the root's have returned: a root that waited for
  // that rank's header would fail at its deadline instead.
  const CollectiveArgs shape = SmallBroadcast();
  constexpr int kCalls = static_cast<int>(CollectiveContext::kHeaderCheckInterval);
  std::atomic<bool> root_done{false};
  const std::vector<absl::Status> root =
      RootAhead(kCalls, absl::Seconds(5), root_done, [&](Rank& made) -> absl::Status {
        if (!AwaitFlag(root_done, absl::Seconds(20))) {
          return InternalError("the root's broadcasts did not return");
        }
        for (int call = 0; call < kCalls; ++call) {
          std::vector<int32_t> data(shape.count);
          CollectiveArgs args = shape;
          args.send = data.data();
          args.recv = data.data();
          const CollectiveHeader header =
              CollectiveHeader::For(shape, AlgorithmId::kBinomial, static_cast<uint32_t>(call), 2);
          CollectiveContext ctx(*made.state, args, header, Deadline::After(absl::Seconds(5)));
          ctx.Start();
          CHORUS_RETURN_IF_ERROR(BinomialBroadcast(ctx, args));
          CHORUS_RETURN_IF_ERROR(ctx.Finish());
          CHORUS_RETURN_IF_ERROR(ExpectEqual(data, Pattern(100, shape.count), "a broadcast"));
        }
        return absl::OkStatus();
      });
  REQUIRE(root.size() == static_cast<size_t>(kCalls));
  for (const absl::Status& status : root) CHECK(status.ok());
}

TEST_CASE("a broadcast root runs a bounded number of calls ahead of a silent rank",
          "[context][run_ahead]") {
  // The other rank never enters: the root's call after the allowance waits for that rank's
  // first header and fails at its deadline, naming the rank and the call it waited for.
  constexpr int kAhead = static_cast<int>(CollectiveContext::kHeaderCheckInterval);
  std::atomic<bool> root_done{false};
  const std::vector<absl::Status> root =
      RootAhead(kAhead + 3, absl::Milliseconds(300), root_done, [&](Rank&) -> absl::Status {
        AwaitFlag(root_done, absl::Seconds(30));
        return absl::OkStatus();
      });
  const absl::Status stopped = CallAfterInterval(root);
  INFO(stopped.ToString());
  CHECK(GetErrorKind(stopped) == ErrorKind::kDeadlineExceeded);
  CHECK(ErrorPeerRank(stopped) == std::optional<int>(1 - SmallBroadcast().root));
  CHECK(absl::StrContains(stopped.message(), absl::StrCat("broadcast #", kAhead)));
  CHECK(absl::StrContains(stopped.message(), "broadcast #0"));
}

TEST_CASE("a header checked by a later call that disagrees is a mismatch naming its call",
          "[context][run_ahead]") {
  // The other rank sends only the one header the root checks later, for a broadcast of
  // another count. It sends nothing more: the root closes its mesh once it finds the mismatch,
  // and a send in flight then would fail on this rank.
  constexpr int kAhead = static_cast<int>(CollectiveContext::kHeaderCheckInterval);
  std::atomic<bool> root_done{false};
  const CollectiveArgs shape = SmallBroadcast();
  const std::vector<absl::Status> root =
      RootAhead(kAhead + 3, absl::Seconds(5), root_done, [&](Rank& made) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(Connection * connection, made.state->GetConnection(shape.root));
        CollectiveArgs other_count = shape;
        other_count.count = shape.count + 1;
        const CollectiveHeader::Wire wire =
            CollectiveHeader::For(other_count, AlgorithmId::kBinomial, 0, 2).Encode();
        RequestPtr send = connection->Send(CollectiveTag(made.state->tag_id(), 0, kHeaderStep),
                                           wire.data(), wire.size());
        CHORUS_RETURN_IF_ERROR(send->Wait(Deadline::After(absl::Seconds(10))));
        AwaitFlag(root_done, absl::Seconds(30));
        return absl::OkStatus();
      });
  const absl::Status found = CallAfterInterval(root);
  INFO(found.ToString());
  CHECK(GetErrorKind(found) == ErrorKind::kMismatch);
  CHECK(absl::StrContains(found.message(), "earlier, broadcast #0"));
  CHECK(absl::StrContains(found.message(), "count 4 vs 5"));
}

}  // namespace
}  // namespace chorus::testing
