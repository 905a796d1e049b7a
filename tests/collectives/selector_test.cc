// Algorithm selection: the rule grammar (both spellings, errors that name the bad piece), the
// cost model's choices by size and rank count, per-call choices, and CHORUS_ALGO applied to a
// communicator and visible on the Work handle.
#include "chorus/collectives/selector.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <vector>

#include "absl/strings/match.h"
#include "chorus/core/status.h"
#include "tests/collectives/world.h"
#include "tests/transport/captured_log.h"

namespace chorus::testing {
namespace {

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
  CostParams slow = DefaultCostParams("tcp");
  slow.alpha_us = 1e6;
  const Selector selector({}, slow, 256 * 1024);
  CHECK(Chosen(selector, AllReduceArgs(1 << 20), 8) == "recursive_doubling");
}

TEST_CASE("the cost model picks latency algorithms for small messages", "[selector]") {
  const Selector tcp({}, DefaultCostParams("tcp"), 256 * 1024);
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

TEST_CASE("rules and per-call choices override the model", "[selector]") {
  const Selector selector(*ParseAlgorithmRules("allreduce:0-1k=binomial,1k-inf=double_binary_tree"),
                          DefaultCostParams("tcp"), 256 * 1024);
  CHECK(Chosen(selector, AllReduceArgs(100), 8) == "binomial");
  CHECK(Chosen(selector, AllReduceArgs(1024), 8) == "double_binary_tree");
  CHECK(Chosen(selector, AllReduceArgs(100), 8, "ring") == "ring");
  auto wrong = selector.Choose(AllReduceArgs(100), 8, "pairwise");
  CHECK(GetErrorKind(wrong.status()) == ErrorKind::kInvalidArgument);
}

TEST_CASE("CHORUS_ALGO reaches the communicator and the Work handle", "[selector]") {
  setenv("CHORUS_ALGO", "allreduce:0-inf=binomial;allgather:0-inf=ring", 1);
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

  setenv("CHORUS_ALGO", "allreduce:0-inf=pairwise", 1);
  const absl::Status bad = RunOnThreads(
      TransportKind::kInproc, 1, [](Communicator&) { return absl::OkStatus(); }, absl::Minutes(1));
  unsetenv("CHORUS_ALGO");
  INFO(bad.ToString());
  CHECK(GetErrorKind(bad) == ErrorKind::kInvalidArgument);
  CHECK(absl::StrContains(bad.message(), "CHORUS_ALGO"));
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

}  // namespace
}  // namespace chorus::testing
