// Algorithm selection: the rule grammar (both spellings, errors that name the bad piece), the
// cost model's choices by size and rank count, per-call choices, CHORUS_ALGO applied to a
// communicator and visible on the Work handle, and the pipeline segment each device kind gets.
#include "chorus/collectives/select/selector.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "chorus/transport/shm/shm_device.h"
#include "chorus/transport/tcp/tcp_device.h"
#include "tests/collectives/world.h"
#include "tests/transport/captured_log.h"
#include "tests/transport/scoped_env.h"
#include "tests/transport/scoped_one_core.h"

namespace chorus::testing {
namespace {

const PipelineSegments kTcpSegments = PipelineSegmentsFor(tcp::kTcpLink);

CollectiveArgs AllReduceArgs(size_t bytes) {
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllReduce;
  args.type = DataType::kUint8;
  args.count = bytes;
  return args;
}

std::string Chosen(const Selector& selector, const CollectiveArgs& args, int ranks,
                   absl::string_view forced = "") {
  auto entry = selector.Choose(args, ranks, forced);
  REQUIRE(entry.ok());
  return std::string(AlgorithmName((*entry)->id));
}

// Creating a one-rank communicator with environment variable `name` set to `value` fails with
// kInvalidArgument naming the variable.
void ExpectRefused(const char* name, const char* value) {
  absl::Status status;
  {
    ScopedEnv setting(name, value);
    status = RunOnThreads(
        TransportKind::kInproc, 1, [](Communicator&) { return absl::OkStatus(); },
        absl::Minutes(1));
  }
  INFO(name << "=" << value << ": " << status.ToString());
  CHECK(GetErrorKind(status) == ErrorKind::kInvalidArgument);
  CHECK(absl::StrContains(status.message(), name));
}

TEST_CASE("rules parse in both spellings", "[selector]") {
  auto rules = ParseAlgorithmRules(
      "allreduce:0-64k=recursive_doubling,64k-inf=ring; broadcast:0-inf=binomial");
  REQUIRE(rules.ok());
  REQUIRE(rules->size() == 3);
  CHECK((*rules)[0].max_bytes == 64 * 1024);
  CHECK((*rules)[1].algorithm == AlgorithmId::kRing);
  CHECK((*rules)[2].kind == CollectiveKind::kBroadcast);
  auto ucc = ParseAlgorithmRules("allreduce:0-4k:@recursive_doubling#allreduce:4k-inf:@ring");
  REQUIRE(ucc.ok());
  CHECK(ucc->size() == 2);
  CHECK(ParseAlgorithmRules("")->empty());
}

TEST_CASE("malformed rules are rejected with the offending text", "[selector]") {
  for (const char* bad :
       {"allreduce", "allreduce:0-=ring", "allreduce:4k-1k=ring", "allreduce:0-inf=bogus",
        "allreduce:0-inf=pairwise", "frobnicate:0-1=ring", "allreduce:0-1k"}) {
    auto rules = ParseAlgorithmRules(bad);
    INFO(bad << " -> " << rules.status().ToString());
    CHECK(GetErrorKind(rules.status()) == ErrorKind::kInvalidArgument);
  }
  auto wrong = ParseAlgorithmRules("allreduce:0-inf=pairwise");
  CHECK(absl::StrContains(wrong.status().message(), "ring"));  // lists the valid choices
}

TEST_CASE("cost parameters parse and reject nonsense", "[selector]") {
  auto cost = ParseCostParams("alpha_us=40, gamma_ns=0.2");
  REQUIRE(cost.ok());
  CHECK(cost->alpha_us == 40);
  CHECK(cost->beta_ns_per_byte == 0);  // unnamed: the device's default
  CHECK(cost->gamma_ns_per_byte == 0.2);
  CHECK(GetErrorKind(ParseCostParams("alpha=3").status()) == ErrorKind::kInvalidArgument);
  CHECK(GetErrorKind(ParseCostParams("beta_ns=-1").status()) == ErrorKind::kInvalidArgument);
  // A huge alpha makes latency dominate: the selector moves to the fewest-step algorithm.
  CostParams slow = LinkCost(tcp::kTcpLink);
  slow.alpha_us = 1e6;
  const Selector selector({}, slow, {256 * 1024, 256 * 1024});
  CHECK(Chosen(selector, AllReduceArgs(1 << 20), 8) == "recursive_doubling");
}

TEST_CASE("the cost model picks latency algorithms for small messages", "[selector]") {
  const Selector tcp({}, LinkCost(tcp::kTcpLink), {256 * 1024, 256 * 1024});
  CHECK(Chosen(tcp, AllReduceArgs(64), 8) == "recursive_doubling");
  CHECK(Chosen(tcp, AllReduceArgs(1024), 4) == "recursive_doubling");
  const std::string large = Chosen(tcp, AllReduceArgs(64 << 20), 8);
  CHECK((large == "ring" || large == "rabenseifner"));
  CHECK(Chosen(tcp, AllReduceArgs(64 << 20), 6) == "ring");  // Rabenseifner folds at 6
  CollectiveArgs barrier;
  barrier.kind = CollectiveKind::kBarrier;
  CHECK(Chosen(tcp, barrier, 5) == "dissemination");
  // Every estimate is finite and positive.
  for (const AlgorithmEntry& entry : AlgorithmTable()) {
    for (int p : {2, 3, 8, 64}) {
      const double micros = tcp.EstimateMicros(entry, p, 1 << 20);
      CHECK(micros > 0);
      CHECK(micros < 1e9);
    }
  }
}

TEST_CASE("finer tree segments move broadcast and reduce to the double binary tree sooner",
          "[selector]") {
  // The double binary tree fills a pipeline one tree segment per level below the first; the
  // binomial tree sends the whole array at each of its levels. Over TCP at 8 ranks, 1 MiB is
  // where they cross: with the link's relay segments (half its ring segment) the double tree
  // wins there, with tree segments as large as the ring's it does not.
  REQUIRE(kTcpSegments.tree_bytes == kTcpSegments.ring_bytes / 2);
  const Selector halved({}, LinkCost(tcp::kTcpLink), kTcpSegments);
  const size_t ring = kTcpSegments.ring_bytes;
  const Selector whole({}, LinkCost(tcp::kTcpLink), {ring, ring});
  for (CollectiveKind kind : {CollectiveKind::kBroadcast, CollectiveKind::kReduce}) {
    CollectiveArgs args;
    args.kind = kind;
    args.type = DataType::kUint8;
    args.count = 1 << 20;
    INFO(CollectiveKindName(kind));
    CHECK(Chosen(halved, args, 8) == "double_binary_tree");
    CHECK(Chosen(whole, args, 8) == "binomial");
    args.count = 256 << 10;
    CHECK(Chosen(halved, args, 8) == "binomial");
  }
  // A tree of 3 or 4 ranks is two links deep: its pipeline fills one segment past the stream,
  // so over TCP a 1 MiB broadcast (two relay segments) takes the double tree, 512 KiB does not.
  CollectiveArgs broadcast;
  broadcast.kind = CollectiveKind::kBroadcast;
  broadcast.type = DataType::kUint8;
  for (int ranks : {3, 4}) {
    INFO(ranks << " ranks");
    broadcast.count = 1 << 20;
    CHECK(Chosen(halved, broadcast, ranks) == "double_binary_tree");
    broadcast.count = 512 << 10;
    CHECK(Chosen(halved, broadcast, ranks) == "binomial");
  }
  // As the trees run: two ranks are one link, priced with the ring's segment.
  const CostParams tcp = LinkCost(tcp::kTcpLink);
  CHECK(MakeCostInputs(tcp, 2, 1 << 20, kTcpSegments).tree_segment_bytes == ring);
  CHECK(MakeCostInputs(tcp, 3, 1 << 20, kTcpSegments).tree_segment_bytes == ring / 2);
}

TEST_CASE("on cores the ranks share, broadcast and reduce stay on the binomial tree",
          "[selector]") {
  // The double binary tree pipelines its halves down its levels; where the ranks copy what they
  // send on fewer cores than there are ranks, those transfers take turns instead, and the tree
  // only adds messages.
  const CostParams shm = LinkCost(chorus::shm::kShmLink);
  const PipelineSegments segments = PipelineSegmentsFor(chorus::shm::kShmLink);
  const Selector dedicated({}, shm, segments);
  const Selector shared({}, shm, segments, {}, {}, /*shared_slots=*/false, /*cores_shared=*/true);
  for (CollectiveKind kind : {CollectiveKind::kBroadcast, CollectiveKind::kReduce}) {
    CollectiveArgs args;
    args.kind = kind;
    args.type = DataType::kUint8;
    for (int ranks : {3, 4, 8, 64}) {
      INFO(CollectiveKindName(kind) << " on " << ranks << " ranks");
      args.count = size_t{64} << 20;
      CHECK(Chosen(dedicated, args, ranks) == "double_binary_tree");
      for (size_t bytes = 4; bytes <= (size_t{1} << 30); bytes *= 8) {
        args.count = bytes;
        CHECK(Chosen(shared, args, ranks) == "binomial");
      }
    }
  }
  // Allreduce's choices do not change.
  for (size_t bytes = 4; bytes <= (size_t{1} << 30); bytes *= 8) {
    CHECK(Chosen(shared, AllReduceArgs(bytes), 8) == Chosen(dedicated, AllReduceArgs(bytes), 8));
  }
}

TEST_CASE("a communicator prices trees on shared cores where its ranks copy on too few",
          "[selector]") {
  // Three ranks on one core. Over shm the ranks copy every byte themselves; over TCP the model
  // keeps pricing the double tree's pipeline (a link whose copies are not the ranks' own).
  auto picks = [](TransportKind kind) {
    CapturedLog log("info");
    std::string broadcast;
    std::string reduce;
    absl::Status status;
    {
      ScopedOneCore pinned;
      status = RunOnThreads(
          kind, 3,
          [&](Communicator& comm) -> absl::Status {
            if (comm.rank() != 0) return absl::OkStatus();
            CHORUS_ASSIGN_OR_RETURN(broadcast,
                                    comm.ChooseAlgorithm(CollectiveKind::kBroadcast, 64 << 20));
            CHORUS_ASSIGN_OR_RETURN(reduce,
                                    comm.ChooseAlgorithm(CollectiveKind::kReduce, 64 << 20));
            return absl::OkStatus();
          },
          absl::Minutes(1));
    }
    REQUIRE(status.ok());
    const bool logged = absl::StrContains(log.Read(), "more ranks than cores");
    return std::tuple{broadcast, reduce, logged};
  };
  CHECK(picks(TransportKind::kShm) == std::tuple{"binomial", "binomial", true});
  CHECK(picks(TransportKind::kTcp) ==
        std::tuple{"double_binary_tree", "double_binary_tree", false});
}

TEST_CASE("rules and per-call choices override the model", "[selector]") {
  const Selector selector(*ParseAlgorithmRules("allreduce:0-1k=binomial,1k-inf=double_binary_tree"),
                          LinkCost(tcp::kTcpLink), {256 * 1024, 256 * 1024});
  CHECK(Chosen(selector, AllReduceArgs(100), 8) == "binomial");
  CHECK(Chosen(selector, AllReduceArgs(1024), 8) == "double_binary_tree");
  CHECK(Chosen(selector, AllReduceArgs(100), 8, "ring") == "ring");
  auto wrong = selector.Choose(AllReduceArgs(100), 8, "pairwise");
  CHECK(GetErrorKind(wrong.status()) == ErrorKind::kInvalidArgument);
}

TEST_CASE("CHORUS_ALGO reaches the communicator and the Work handle", "[selector]") {
  ScopedEnv rules("CHORUS_ALGO", "allreduce:0-inf=binomial;allgather:0-inf=ring");
  const absl::Status status = RunOnThreads(
      TransportKind::kInproc, 3,
      [](Communicator& comm) -> absl::Status {
        // Separate buffers: the two collectives are in flight at the same time.
        std::vector<float> data(10, 1.0f), mine(10, 2.0f), gathered(30);
        WorkPtr reduce =
            comm.AllReduceAsync(data.data(), data.data(), 10, DataType::kFloat32, ReduceOp::kSum);
        WorkPtr gather = comm.AllGatherAsync(mine.data(), gathered.data(), 10, DataType::kFloat32);
        CHORUS_RETURN_IF_ERROR(reduce->Wait());
        CHORUS_RETURN_IF_ERROR(gather->Wait());
        if (reduce->algorithm() != "binomial" || gather->algorithm() != "ring") {
          return InternalError("CHORUS_ALGO was not applied: " + reduce->algorithm() + ", " +
                               gather->algorithm());
        }
        CHORUS_ASSIGN_OR_RETURN(std::string would,
                                comm.ChooseAlgorithm(CollectiveKind::kAllReduce, 1 << 20));
        return would == "binomial" ? absl::OkStatus() : InternalError(would);
      },
      absl::Minutes(1));
  INFO(status.ToString());
  CHECK(status.ok());

  ExpectRefused("CHORUS_ALGO", "allreduce:0-inf=pairwise");
}

TEST_CASE("the chosen algorithm is named in the debug log", "[selector]") {
  CapturedLog log("debug");
  CollectiveOptions forced;
  forced.algorithm = "recursive_doubling";
  const absl::Status status = RunOnThreads(
      TransportKind::kInproc, 2,
      [&](Communicator& comm) -> absl::Status {
        std::vector<int32_t> data(5, 1);
        return comm.AllReduce(data.data(), data.data(), 5, DataType::kInt32, ReduceOp::kSum,
                              forced);
      },
      absl::Minutes(1));
  INFO(status.ToString());
  REQUIRE(status.ok());
  const std::string text = log.Read();
  INFO(text);
  CHECK(absl::StrContains(text, "algorithm recursive_doubling"));
  CHECK(absl::StrContains(text, "allreduce #"));
}

TEST_CASE("the pipeline segment is the device kind's unless set", "[selector]") {
  // The communicator logs the segment it resolved (info) when it is created.
  auto segment_logged = [](TransportKind kind) -> std::string {
    CapturedLog log("info");
    const absl::Status status = RunOnThreads(
        kind, 2, [](Communicator&) { return absl::OkStatus(); }, absl::Minutes(1));
    if (!status.ok()) return status.ToString();
    return log.Read();
  };
  std::string text = segment_logged(TransportKind::kShm);
  INFO(text);
  CHECK(absl::StrContains(text, "segments of 2097152 B (rings) and 2097152 B (trees)"));
  text = segment_logged(TransportKind::kInproc);
  INFO(text);
  CHECK(absl::StrContains(text, "segments of 1048576 B (rings) and 1048576 B (trees)"));
  // TCP relays in finer segments than it streams.
  text = segment_logged(TransportKind::kTcp);
  INFO(text);
  CHECK(absl::StrContains(text, "segments of 1048576 B (rings) and 524288 B (trees)"));

  {
    ScopedEnv setting("CHORUS_COLL_SEGMENT_BYTES", "64k");
    text = segment_logged(TransportKind::kShm);
    INFO(text);
    CHECK(absl::StrContains(text, "segments of 65536 B (rings) and 65536 B (trees)"));
  }
  {
    ScopedEnv setting("CHORUS_COLL_SEGMENT_BYTES", "0");  // 0: the device kind's
    text = segment_logged(TransportKind::kShm);
    INFO(text);
    CHECK(absl::StrContains(text, "segments of 2097152 B (rings) and 2097152 B (trees)"));
  }
  ExpectRefused("CHORUS_COLL_SEGMENT_BYTES", "-1");
}

TEST_CASE("the model considers hierarchical only on a layout of several hosts", "[selector]") {
  auto layout = [](std::vector<int> labels) {
    const int size = static_cast<int>(labels.size());
    return *Topology::FromLabels(labels, size);
  };
  const CostParams tcp = LinkCost(tcp::kTcpLink);
  const CostParams shm = LinkCost(chorus::shm::kShmLink);
  const Selector two_hosts({}, tcp, kTcpSegments, layout({0, 0, 1, 1}), shm);
  const Selector flat({}, tcp, kTcpSegments, layout({0, 0, 0, 0}), shm);
  const Selector one_per_host({}, tcp, kTcpSegments, layout({0, 1, 2, 3}), shm);
  const Selector unknown({}, tcp, kTcpSegments);
  for (CollectiveKind kind :
       {CollectiveKind::kAllReduce, CollectiveKind::kBroadcast, CollectiveKind::kReduce,
        CollectiveKind::kAllGather, CollectiveKind::kReduceScatter}) {
    // 1 MiB: from a few tens of MiB the flat trees' broadcast and reduce win over two hosts
    // (selection_table -- hybrid).
    CollectiveArgs args = AllReduceArgs(1 << 20);
    args.kind = kind;
    args.root = 3;
    if (kind == CollectiveKind::kAllGather || kind == CollectiveKind::kReduceScatter) {
      args.count /= 4;
    }
    INFO(CollectiveKindName(kind));
    CHECK(Chosen(two_hosts, args, 4) == "hierarchical");
    CHECK(Chosen(flat, args, 4) != "hierarchical");
    CHECK(Chosen(one_per_host, args, 4) != "hierarchical");
    CHECK(Chosen(unknown, args, 4) != "hierarchical");
    // Forcing it is always allowed: on a flat layout it runs the flat phases.
    CHECK(Chosen(flat, args, 4, "hierarchical") == "hierarchical");
  }
  // Rules may name it.
  const Selector ruled(*ParseAlgorithmRules("allreduce:0-inf=hierarchical"), tcp, kTcpSegments);
  CHECK(Chosen(ruled, AllReduceArgs(100), 4) == "hierarchical");
  // Its estimate is the sum of its phases': on two hosts below the flat ring's, which pays the
  // network for every byte; on one host, with equal links, never below the cheapest flat one.
  const AlgorithmEntry* hierarchical =
      FindAlgorithm(CollectiveKind::kAllReduce, AlgorithmId::kHierarchical);
  const AlgorithmEntry* ring = FindAlgorithm(CollectiveKind::kAllReduce, AlgorithmId::kRing);
  CHECK(two_hosts.EstimateMicros(*hierarchical, 4, 64 << 20) <
        two_hosts.EstimateMicros(*ring, 4, 64 << 20));
  const Selector same_links({}, tcp, kTcpSegments, layout({0, 0, 0, 0}), tcp);
  CHECK(same_links.EstimateMicros(*hierarchical, 4, 1 << 20) >=
        same_links.EstimateMicros(*CheapestFlat(CollectiveKind::kAllReduce,
                                                MakeCostInputs(tcp, 4, 1 << 20, kTcpSegments)),
                                  4, 1 << 20));
}

TEST_CASE("over the hybrid transport the communicator learns the hosts and takes hierarchical",
          "[selector]") {
  // kHybrid puts ranks 2h and 2h+1 on host h: the mesh tells the communicator.
  const absl::Status status = RunOnThreads(
      TransportKind::kHybrid, 4,
      [](Communicator& comm) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(const std::string would,
                                comm.ChooseAlgorithm(CollectiveKind::kAllReduce, 64 << 20));
        CHORUS_RETURN_IF_ERROR(Expect(would == "hierarchical", would));
        std::vector<int32_t> data(1 << 16, comm.rank() + 1);
        WorkPtr work = comm.AllReduceAsync(data.data(), data.data(), data.size(), DataType::kInt32,
                                           ReduceOp::kSum);
        CHORUS_RETURN_IF_ERROR(work->Wait());
        CHORUS_RETURN_IF_ERROR(Expect(work->algorithm() == "hierarchical", work->algorithm()));
        for (int32_t v : data) CHORUS_RETURN_IF_ERROR(Expect(v == 10, absl::StrCat(v)));
        const std::string dump = comm.FlightRecorderDump();
        return Expect(absl::StrContains(dump, "hierarchical"), dump);
      },
      absl::Minutes(1));
  INFO(status.ToString());
  CHECK(status.ok());

  // Options override the transport: one host, or one rank per host, is flat.
  for (const std::vector<int>& labels :
       {std::vector<int>{0, 0, 0, 0}, std::vector<int>{0, 1, 2, 3}}) {
    CommunicatorOptions options;
    options.host_of_rank = labels;
    const absl::Status flat = RunOnThreads(
        TransportKind::kHybrid, 4,
        [](Communicator& comm) -> absl::Status {
          for (size_t bytes : {size_t{64}, size_t{1} << 20, size_t{64} << 20}) {
            CHORUS_ASSIGN_OR_RETURN(const std::string chosen,
                                    comm.ChooseAlgorithm(CollectiveKind::kAllReduce, bytes));
            CHORUS_RETURN_IF_ERROR(Expect(chosen != "hierarchical", chosen));
          }
          return absl::OkStatus();
        },
        absl::Minutes(1), options);
    INFO(absl::StrCat(labels[1]) << ": " << flat.ToString());
    CHECK(flat.ok());
  }
}

}  // namespace
}  // namespace chorus::testing
