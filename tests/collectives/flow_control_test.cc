// Flow control in the pipelined algorithms: a rank never gets far ahead of the receives its
// peers have posted, however many segments a message has. A message sent beyond them arrives
// unexpected and the transport keeps it aside (shm copies a large one into memory of its own).
// A ring with more segments than its pipeline window, a broadcast root or the reduce leaves of
// a tree that sent without this bound would send most of their messages that way, which costs
// shm about half its bandwidth at 256 MiB (docs/benchmarks.md, "Why the defaults are what they
// are").
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chorus/collectives/algorithms/algorithms.h"
#include "chorus/collectives/engine/comm_state.h"
#include "chorus/collectives/engine/context.h"
#include "chorus/collectives/engine/header.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/memory_store.h"
#include "chorus/rendezvous/prefix_store.h"
#include "tests/collectives/world.h"
#include "tests/harness/multirank.h"

namespace chorus::testing {
namespace {

// Counts, for every ordered pair of ranks, the sends posted from one to the other against the
// receives the other has posted for them, and remembers how far the sends ever led.
class PostCounts {
 public:
  void Sent(int from, int to) {
    std::lock_guard<std::mutex> lock(mu_);
    const int lead = ++outstanding_[{from, to}];
    max_lead_ = std::max(max_lead_, lead);
    ++sends_;
  }
  void Posted(int from, int to) {
    std::lock_guard<std::mutex> lock(mu_);
    --outstanding_[{from, to}];
  }
  // The most sends from one rank that were ever posted before their receives.
  int MaxLead() const {
    std::lock_guard<std::mutex> lock(mu_);
    return max_lead_;
  }
  int Sends() const {
    std::lock_guard<std::mutex> lock(mu_);
    return sends_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<int, int>, int> outstanding_;  // sends minus receives posted, per pair
  int max_lead_ = 0;
  int sends_ = 0;
};

// A connection that reports its posts to PostCounts before passing them on.
class CountingConnection final : public Connection {
 public:
  CountingConnection(Connection& inner, int self, PostCounts& counts)
      : inner_(inner), self_(self), counts_(counts) {}
  int peer() const override { return inner_.peer(); }
  RequestPtr Send(Tag tag, ConstMemoryRef buffer) override {
    counts_.Sent(self_, peer());
    return inner_.Send(tag, buffer);
  }
  RequestPtr Recv(Tag tag, MemoryRef buffer) override {
    counts_.Posted(peer(), self_);
    return inner_.Recv(tag, buffer);
  }
  RequestPtr RecvWithSink(Tag tag, MemoryRef buffer, RecvSink* sink) override {
    counts_.Posted(peer(), self_);
    return inner_.RecvWithSink(tag, buffer, sink);
  }

 private:
  Connection& inner_;
  const int self_;
  PostCounts& counts_;
};

class CountingMesh final : public Mesh {
 public:
  CountingMesh(std::unique_ptr<Mesh> inner, PostCounts& counts)
      : inner_(std::move(inner)), counts_(counts) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  absl::StatusOr<Connection*> GetConnection(int peer) override {
    CHORUS_ASSIGN_OR_RETURN(Connection * inner, inner_->GetConnection(peer));
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<CountingConnection>& counting = connections_[peer];
    if (counting == nullptr) {
      counting = std::make_unique<CountingConnection>(*inner, rank(), counts_);
    }
    return counting.get();
  }
  RequestPtr RecvFromAny(absl::Span<const int> peers, Tag tag, MemoryRef buffer) override {
    return inner_->RecvFromAny(peers, tag, buffer);  // the ring never uses it
  }
  void Abort(absl::string_view reason) override { inner_->Abort(reason); }

 private:
  const std::unique_ptr<Mesh> inner_;
  PostCounts& counts_;
  std::mutex mu_;
  std::map<int, std::unique_ptr<CountingConnection>> connections_;
};

constexpr size_t kSegmentBytes = 4096;
constexpr int kWindow = 2;
constexpr size_t kSegments = 32;  // per block of the ring, per message of a tree
// Segments of the other kind where a test tells which kind an algorithm takes.
constexpr size_t kCoarse = 4 * kSegmentBytes;

using Algorithm = absl::Status (*)(CollectiveContext&, const CollectiveArgs&);

// What one collective posted: its sends, and the most that ever led their receives.
struct Posts {
  int sends = 0;
  int max_lead = 0;
};

// One collective of `kind` (allreduce, broadcast or reduce; sum, root 0) over float32 on
// `ranks` threads of the in-process transport, with `algorithm`, `segments` and a window of 2,
// over kSegments segments of kSegmentBytes per block of a ring or message of a tree. Checks the
// result.
Posts CountPosts(int ranks, CollectiveKind kind, AlgorithmId id, Algorithm algorithm,
                 PipelineSegments segments) {
  MemoryStore store;
  PostCounts counts;
  const size_t blocks = kind == CollectiveKind::kAllReduce ? ranks : 1;
  const size_t count = blocks * kSegments * kSegmentBytes / sizeof(float);
  const std::vector<absl::Status> statuses = RunRanksAsThreads(
      ranks,
      [&](int rank) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                                MakeDevice(TransportKind::kInproc, rank));
        auto scoped = std::make_unique<PrefixStore>("flow", store);
        PrefixStore mesh_store("mesh", *scoped);
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Mesh> mesh,
                                device->CreateMesh(mesh_store, rank, ranks, MeshOptions{},
                                                   Deadline::After(absl::Seconds(30))));
        CommTuning tuning;
        tuning.segments = segments;
        tuning.pipeline_depth = kWindow;
        CommState state("flow", rank, ranks, std::move(scoped),
                        std::make_unique<CountingMesh>(std::move(mesh), counts), tuning,
                        Topology::Flat(ranks), /*trace=*/nullptr);
        // Element i of rank r holds r + i % 7 (the broadcast root's, rank 0, for everyone).
        std::vector<float> data(count);
        for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(rank + i % 7);
        CollectiveArgs args;
        args.kind = kind;
        args.type = DataType::kFloat32;
        args.op = ReduceOp::kSum;
        args.root = kind == CollectiveKind::kAllReduce ? -1 : 0;
        args.count = count;
        args.send = data.data();
        args.recv = data.data();
        CollectiveContext ctx(state, args, CollectiveHeader::For(args, id, /*sequence=*/0, ranks),
                              Deadline::After(absl::Seconds(20)));
        ctx.Start();
        CHORUS_RETURN_IF_ERROR(algorithm(ctx, args));
        CHORUS_RETURN_IF_ERROR(ctx.Finish());
        if (kind == CollectiveKind::kReduce && rank != 0) return absl::OkStatus();
        const bool summed = kind != CollectiveKind::kBroadcast;
        const float rank_sum = summed ? static_cast<float>(ranks * (ranks - 1) / 2) : 0;
        for (size_t i = 0; i < count; ++i) {
          const float want = rank_sum + static_cast<float>((summed ? ranks : 1) * (i % 7));
          if (data[i] != want) {
            return Expect(false, absl::StrCat("element ", i, " is ", data[i], ", not ", want));
          }
        }
        return absl::OkStatus();
      },
      absl::Minutes(1));
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].ToString());
    CHECK(statuses[rank].ok());
  }
  return {counts.Sends(), counts.MaxLead()};
}

// The largest lead of sends over receives in CountPosts' collective, cut into kSegmentBytes
// segments; checks that every segment was sent.
int MaxLead(int ranks, CollectiveKind kind, AlgorithmId id, Algorithm algorithm) {
  const Posts posts = CountPosts(ranks, kind, id, algorithm, {kSegmentBytes, kSegmentBytes});
  CHECK(posts.sends >= static_cast<int>(kSegments));
  return posts.max_lead;
}

TEST_CASE("the ring sends no further ahead of its neighbour's receives than its window allows",
          "[flow]") {
  for (int ranks : {2, 3}) {
    const int lead = MaxLead(ranks, CollectiveKind::kAllReduce, AlgorithmId::kRing, RingAllReduce);
    // Each rank sends at most `kWindow` messages past the receives it has completed, and its
    // neighbour, held to the same rule, is at most a lap of the ring behind: so at most
    // ranks * kWindow sends, plus the header and one at the moment of posting, lead the
    // receives. Without the rule, all 32 first-step sends went out at once.
    INFO(ranks << " ranks: sends led the receives by up to " << lead);
    CHECK(lead <= ranks * kWindow + 2);
  }
}

TEST_CASE("tree sources keep at most a window of sends ahead of the receives", "[flow]") {
  struct Tree {
    const char* name;
    CollectiveKind kind;
    AlgorithmId id;
    Algorithm algorithm;
  };
  const Tree trees[] = {
      {"binomial broadcast", CollectiveKind::kBroadcast, AlgorithmId::kBinomial, BinomialBroadcast},
      {"binomial reduce", CollectiveKind::kReduce, AlgorithmId::kBinomial, BinomialReduce},
      {"double-tree broadcast", CollectiveKind::kBroadcast, AlgorithmId::kDoubleBinaryTree,
       DoubleTreeBroadcast},
      {"double-tree reduce", CollectiveKind::kReduce, AlgorithmId::kDoubleBinaryTree,
       DoubleTreeReduce},
      {"binomial allreduce", CollectiveKind::kAllReduce, AlgorithmId::kBinomial, BinomialAllReduce},
      {"double-tree allreduce", CollectiveKind::kAllReduce, AlgorithmId::kDoubleBinaryTree,
       DoubleTreeAllReduce},
  };
  for (const Tree& tree : trees) {
    for (int ranks : {2, 4}) {
      const int lead = MaxLead(ranks, tree.kind, tree.id, tree.algorithm);
      // The broadcast root and the reduce leaves wait for the send a window back before the
      // next (the in-process transport completes a send when its receive takes it), so a
      // window, the header and the one being posted lead at most. Without that, all 32 went
      // out at once.
      INFO(tree.name << ", " << ranks << " ranks: sends led the receives by up to " << lead);
      CHECK(lead <= kWindow + 2);
    }
  }
}

TEST_CASE("a tree cuts its array by the tree segment, a ring its blocks by the ring segment",
          "[flow]") {
  // Each runs with its own kind of segment fine and the other coarse, then the other way: the
  // fine run sends at least every segment, and several times the coarse run's messages.
  auto check_follows = [](const char* what, const Posts& fine, const Posts& coarse) {
    INFO(what << ": " << fine.sends << " sends in segments of " << kSegmentBytes << " B, "
              << coarse.sends << " in " << kCoarse << " B");
    CHECK(fine.sends >= static_cast<int>(kSegments));
    CHECK(fine.sends >= 3 * coarse.sends);
  };
  auto broadcast = [](int ranks, PipelineSegments segments) {
    return CountPosts(ranks, CollectiveKind::kBroadcast, AlgorithmId::kBinomial, BinomialBroadcast,
                      segments);
  };
  check_follows("4-rank broadcast, tree segments", broadcast(4, {kCoarse, kSegmentBytes}),
                broadcast(4, {kSegmentBytes, kCoarse}));
  // Between two ranks a tree is one link, cut like a ring's.
  check_follows("2-rank broadcast, ring segments", broadcast(2, {kSegmentBytes, kCoarse}),
                broadcast(2, {kCoarse, kSegmentBytes}));
  auto ring = [](PipelineSegments segments) {
    return CountPosts(2, CollectiveKind::kAllReduce, AlgorithmId::kRing, RingAllReduce, segments);
  };
  check_follows("ring allreduce, ring segments", ring({kSegmentBytes, kCoarse}),
                ring({kCoarse, kSegmentBytes}));
}

}  // namespace
}  // namespace chorus::testing
