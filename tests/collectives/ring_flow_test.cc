// The ring's flow control: a rank never gets far ahead of the receives its neighbour has
// posted, however many segments a message has. A message sent beyond them arrives unexpected
// and the transport keeps it aside (shm copies a large one into memory of its own); a ring
// with more segments than its pipeline window once sent most of its messages that way, which
// halved shm's bandwidth at 256 MiB (docs/benchmarks.md, stop 15).
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
#include "chorus/collectives/comm_state.h"
#include "chorus/collectives/context.h"
#include "chorus/collectives/header.h"
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

 private:
  mutable std::mutex mu_;
  std::map<std::pair<int, int>, int> outstanding_;  // sends minus receives posted, per pair
  int max_lead_ = 0;
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
constexpr size_t kSegmentsPerBlock = 32;

// Runs one ring allreduce of float32 on `ranks` threads over the in-process transport, with
// 32 segments per block and a window of 2, checks the sums and returns the largest lead.
int RingLead(int ranks) {
  MemoryStore store;
  PostCounts counts;
  const size_t count = ranks * kSegmentsPerBlock * kSegmentBytes / sizeof(float);
  const std::vector<absl::Status> statuses = RunRanksAsThreads(
      ranks,
      [&](int rank) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                                MakeDevice(TransportKind::kInproc, rank));
        auto scoped = std::make_unique<PrefixStore>("ring-flow", store);
        PrefixStore mesh_store("mesh", *scoped);
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Mesh> mesh,
                                device->CreateMesh(mesh_store, rank, ranks, MeshOptions{},
                                                   Deadline::After(absl::Seconds(30))));
        CommTuning tuning;
        tuning.segment_bytes = kSegmentBytes;
        tuning.pipeline_depth = kWindow;
        CommState state("ring-flow", rank, ranks, std::move(scoped),
                        std::make_unique<CountingMesh>(std::move(mesh), counts), tuning,
                        Topology::Flat(ranks), /*trace=*/nullptr);
        std::vector<float> data(count);
        for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(rank + i % 7);
        CollectiveArgs args;
        args.kind = CollectiveKind::kAllReduce;
        args.type = DataType::kFloat32;
        args.op = ReduceOp::kSum;
        args.count = count;
        args.send = data.data();
        args.recv = data.data();
        CollectiveContext ctx(
            state, args, CollectiveHeader::For(args, AlgorithmId::kRing, /*sequence=*/0, ranks),
            Deadline::After(absl::Seconds(20)));
        ctx.Start();
        CHORUS_RETURN_IF_ERROR(RingAllReduce(ctx, args));
        CHORUS_RETURN_IF_ERROR(ctx.Finish());
        const float rank_sum = static_cast<float>(ranks * (ranks - 1) / 2);
        for (size_t i = 0; i < count; ++i) {
          const float want = rank_sum + static_cast<float>(ranks * (i % 7));
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
  return counts.MaxLead();
}

TEST_CASE("the ring sends no further ahead of its neighbour's receives than its window allows",
          "[ring]") {
  for (int ranks : {2, 3}) {
    const int lead = RingLead(ranks);
    // Each rank sends at most `kWindow` messages past the receives it has completed, and its
    // neighbour, held to the same rule, is at most a lap of the ring behind: so at most
    // ranks * kWindow sends, plus the header and one at the moment of posting, lead the
    // receives. Without the rule, all 32 first-step sends went out at once.
    INFO(ranks << " ranks: sends led the receives by up to " << lead);
    CHECK(lead <= ranks * kWindow + 2);
    CHECK(lead >= 1);  // the counting sees the ring's traffic at all
  }
}

}  // namespace
}  // namespace chorus::testing
