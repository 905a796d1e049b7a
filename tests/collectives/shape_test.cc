// The table of collective shapes (collectives/shape.h): names, buffer extents, in-place forms,
// argument checks, payload sizes and bus-bandwidth factors.
#include "chorus/collectives/shape.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "chorus/core/status.h"

namespace chorus {
namespace {

using K = CollectiveKind;

CollectiveArgs Args(K kind, size_t count, int root = -1) {
  CollectiveArgs args;
  args.kind = kind;
  args.type = DataType::kFloat32;
  args.count = count;
  args.root = root;
  return args;
}

TEST_CASE("every collective is named, parsed back and in its row") {
  for (int i = 0; i < kNumCollectiveKinds; ++i) {
    const auto kind = static_cast<K>(i);
    INFO(CollectiveKindName(kind));
    CHECK(ShapeOf(kind).kind == kind);
    const absl::StatusOr<K> parsed = ParseCollectiveKind(CollectiveKindName(kind));
    REQUIRE(parsed.ok());
    CHECK(*parsed == kind);
  }
  CHECK(*ParseCollectiveKind(" AllReduce ") == K::kAllReduce);
  const absl::StatusOr<K> unknown = ParseCollectiveKind("scan");
  REQUIRE(!unknown.ok());
  CHECK(std::string(unknown.status().message())
            .find("unknown collective 'scan'; known: "
                  "allreduce, broadcast") == 0);
  CHECK(IsRooted(K::kGatherV));
  CHECK(!IsRooted(K::kAllGather));
  CHECK(IsReduction(K::kReduceScatterV));
  CHECK(!IsReduction(K::kBroadcast));
  // Elementwise: exactly the collectives whose buffers are all `count` elements.
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    const K kind = static_cast<K>(k);
    INFO(CollectiveKindName(kind));
    CHECK(IsElementwise(kind) ==
          (kind == K::kAllReduce || kind == K::kBroadcast || kind == K::kReduce));
  }
  CHECK(!ShapeOf(K::kSend).collective);
}

TEST_CASE("buffer extents follow count, counts and displacements; the root's only on the root") {
  CHECK(ElementsOf(Args(K::kAllGather, 5), 1, 3).send == 5);
  CHECK(ElementsOf(Args(K::kAllGather, 5), 1, 3).recv == 15);
  CHECK(ElementsOf(Args(K::kReduceScatter, 5), 1, 3).send == 15);
  CHECK(ElementsOf(Args(K::kBroadcast, 5, 0), 1, 3).send == 0);
  CHECK(ElementsOf(Args(K::kBroadcast, 5, 0), 0, 3).send == 5);
  CHECK(ElementsOf(Args(K::kReduce, 5, 2), 1, 3).recv == 0);
  CHECK(ElementsOf(Args(K::kGather, 5, 1), 1, 3).recv == 15);
  CHECK(ElementsOf(Args(K::kBarrier, 0), 0, 3).send == 0);

  CollectiveArgs gatherv = Args(K::kGatherV, 2, 0);
  gatherv.counts = {2, 0, 4};
  gatherv.displs = {10, 0, 3};
  CHECK(ElementsOf(gatherv, 0, 3).recv == 12);  // the furthest block ends at 10 + 2
  CHECK(ElementsOf(gatherv, 1, 3).recv == 0);

  CollectiveArgs allgatherv = Args(K::kAllGatherV, 0);
  allgatherv.counts = {1, 2, 3};
  CHECK(ElementsOf(allgatherv, 1, 3).send == 2);
  CHECK(ElementsOf(allgatherv, 1, 3).recv == 6);
}

TEST_CASE("in-place forms: one base, each buffer at its rank's block") {
  const auto offsets = [](const CollectiveArgs& args, int rank) {
    const std::optional<InPlaceOffsets> at = InPlaceOffsetsOf(args, rank);
    REQUIRE(at.has_value());
    return std::vector<size_t>{at->send, at->recv};
  };
  CHECK(offsets(Args(K::kAllReduce, 8), 2) == std::vector<size_t>{0, 0});
  CHECK(offsets(Args(K::kAllGather, 8), 2) == std::vector<size_t>{16, 0});
  CHECK(offsets(Args(K::kReduceScatter, 8), 2) == std::vector<size_t>{0, 16});
  CHECK(offsets(Args(K::kAllToAll, 8), 2) == std::vector<size_t>{0, 0});
  CollectiveArgs rsv = Args(K::kReduceScatterV, 0);
  rsv.counts = {3, 1, 4};
  CHECK(offsets(rsv, 2) == std::vector<size_t>{0, 4});
  CHECK(!InPlaceOffsetsOf(Args(K::kGather, 8, 0), 1).has_value());
  CHECK(!InPlaceOffsetsOf(Args(K::kBarrier, 0), 0).has_value());

  std::vector<float> buffer(24);
  CollectiveArgs allgather = Args(K::kAllGather, 8);
  allgather.recv = buffer.data();
  allgather.send = buffer.data() + 16;
  CHECK(IsInPlace(allgather, 2));
  CHECK(!IsInPlace(allgather, 1));
}

TEST_CASE("argument checks name the parameter as the caller passed it") {
  const auto message = [](const CollectiveArgs& args, int rank) {
    return std::string(CheckShape(args, rank, 3).message());
  };
  CollectiveArgs alltoallv = Args(K::kAllToAllV, 0);
  alltoallv.send_counts = {1, 1, 1};
  alltoallv.send_displs = {0, 1, 2};
  alltoallv.counts = {1, 1};
  CHECK(message(alltoallv, 0) == "alltoallv: recv_counts has 2 entries, not 3");

  CollectiveArgs scatterv = Args(K::kScatterV, 2, 0);
  CHECK(CheckShape(scatterv, 1, 3).ok());  // only the root passes the vectors
  CHECK(message(scatterv, 0) == "scatterv: counts has 0 entries, not 3");
  scatterv.send_counts = {1, 2, 3};
  scatterv.send_displs = {0, 1, 3};
  CHECK(message(scatterv, 0) == "scatterv: the root receives 2 elements but counts[root] is 1");

  std::vector<float> buffer(3);
  alltoallv.counts = {1, 1, 1};
  alltoallv.displs = {2, 1, 0};
  alltoallv.send = alltoallv.recv = buffer.data();
  CHECK(message(alltoallv, 0) ==
        "alltoallv in place needs the same counts and displacements for send and receive");
}

TEST_CASE("payload bytes, nccl-tests style, and the arguments of a given array") {
  CHECK(PayloadBytes(Args(K::kAllReduce, 10), 4) == 40);
  CHECK(PayloadBytes(Args(K::kAllGather, 10), 4) == 160);
  CHECK(PayloadBytes(Args(K::kAllToAll, 10), 4) == 160);
  CollectiveArgs scatterv = Args(K::kScatterV, 2, 0);
  scatterv.send_counts = {1, 2, 3};
  CHECK(PayloadBytes(scatterv, 3) == 24);

  for (int i = 0; i < kNumCollectiveKinds; ++i) {
    const auto kind = static_cast<K>(i);
    INFO(CollectiveKindName(kind));
    const size_t elements = 12 * static_cast<size_t>(ArrayGranularity(kind, 4));
    const CollectiveArgs args = ArgsForArray(kind, elements, 4);
    CHECK(PayloadBytes(args, 4) == elements);
  }
  CHECK(ArgsForArray(K::kReduceScatter, 12, 4).count == 3);
  CHECK(ArgsForArray(K::kAllGatherV, 10, 4).counts == std::vector<size_t>{3, 3, 2, 2});
  CHECK(ArrayGranularity(K::kAllToAll, 4) == 4);
  CHECK(ArrayGranularity(K::kBroadcast, 4) == 1);
}

TEST_CASE("rank blocks, header agreement and bus-bandwidth factors") {
  CHECK(RankBlocks(Args(K::kAllReduce, 10), 4) == std::vector<size_t>{3, 3, 2, 2});
  CHECK(RankBlocks(Args(K::kAllGather, 10), 3) == std::vector<size_t>{10, 10, 10});
  CHECK(AgreedCounts(K::kAllGather) == Agreement::kCount);
  CHECK(AgreedCounts(K::kReduceScatterV) == Agreement::kCounts);
  CHECK(AgreedCounts(K::kGatherV) == Agreement::kNone);
  CHECK(AgreedCounts(K::kAllToAllV) == Agreement::kNone);
  CHECK(BusBandwidthFactor(K::kAllReduce, 4) == Approx(1.5));
  CHECK(BusBandwidthFactor(K::kReduceScatter, 4) == Approx(0.75));
  CHECK(BusBandwidthFactor(K::kBroadcast, 4) == 1);
  CHECK(BusBandwidthFactor(K::kBarrier, 4) == 0);
}

TEST_CASE("one rank copies its own block, at the displacements it names") {
  std::vector<float> in = {1, 2, 3};
  std::vector<float> out(4, 0);
  CollectiveArgs alltoallv = Args(K::kAllToAllV, 0);
  alltoallv.send = in.data();
  alltoallv.recv = out.data();
  alltoallv.send_counts = {2};
  alltoallv.send_displs = {1};
  alltoallv.counts = {2};
  alltoallv.displs = {2};
  CopyOwnBlock(alltoallv);
  CHECK(out == std::vector<float>{0, 0, 2, 3});
}

}  // namespace
}  // namespace chorus
