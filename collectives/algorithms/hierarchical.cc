// Hierarchical collectives: a phase within each host (over shared memory when the transport is
// the hybrid one) and a phase between hosts (over the network), each run by an ordinary flat
// algorithm on a group of ranks through a GroupView, so the flat algorithms need no change and
// this file never asks which transport carries a message. The layout is ctx.topology():
// hosts, and each rank's local index (its place among its host's ranks, in rank order).
//
// Two shapes:
//   slices   (every host holds the same number k of ranks): the ranks with local index i on
//            all hosts form slice group i, and the inter-host phase runs in all k slice
//            groups at once, each on 1/k of the data, so every rank's network link carries
//            a share instead of one leader's carrying all of it.
//   leaders  (uneven hosts): the leader of each host (its lowest rank; for broadcast and
//            reduce the root on the root's host) carries the host's data between hosts.
//
//   allreduce       slices:  reduce-scatter within the host (slice i to local rank i),
//                            allreduce of slice i in slice group i, allgather within the host.
//                   leaders: reduce to the leader, allreduce among leaders, broadcast from it.
//   broadcast       broadcast among leaders (the root leads its host), then within each host.
//   reduce          reduce to each host's leader, then among leaders to the root.
//   allgather(v)    slices:  allgatherv in slice group i, then within the host; reorder.
//                   leaders: gatherv to the leader, allgatherv of the hosts' blocks among
//                            leaders, broadcast within the host; reorder.
//   reduce_scatter  slices:  reorder, reduce-scatterv within the host (local rank i gets the
//   (v)                      blocks of slice group i), reduce-scatterv in slice group i.
//                   leaders: reorder, reduce to the leader, reduce-scatterv of the hosts'
//                            blocks among leaders, scatterv within the host.
// The v forms share the code: a rank's block is counts[rank] elements instead of count.
// "Reorder" is one copy through scratch between the rank-ordered layout of the collective's
// buffers and the host-grouped layout the phases need (hosts need not be contiguous ranges).
//
// A phase ends when its own sends have finished, since the next phase may reuse their buffers.
//
// Each phase takes the cheapest flat algorithm for its collective, group size and bytes under
// CommTuning::local_cost (within a host) or network_cost (between hosts); all members of a
// group compute the same choice. A phase of one rank is a copy. On one host, or with one rank
// per host, the algorithm degenerates to the flat phases (correct, but no better than flat).
//
// Phase p's steps start at p * kPhaseSteps, so phases never share a (peer, step) tag unless a
// phase uses more than kPhaseSteps steps; even then both sides post a pair's messages in the
// same order and the transport keeps them in order per (peer, tag), as with any step wrap.
//
// Determinism: every phase is deterministic and the result of a reduction is computed once
// and then copied, so all ranks get identical bits (the same as each other, not necessarily
// the same as a flat algorithm's).
#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chorus/collectives/algorithms/algorithms.h"
#include "chorus/collectives/algorithms/blocks.h"
#include "chorus/core/logging.h"

namespace chorus {
namespace {

using K = CollectiveKind;

constexpr uint64_t kPhaseSteps = 0x4000;

enum class Link { kLocal, kNetwork };

// The cost inputs of a phase over `link` among `ranks` moving `bytes`.
CostInputs PhaseInputs(const CostInputs& in, Link link, int ranks, double bytes) {
  CostInputs phase = in;
  phase.ranks = ranks;
  phase.bytes = bytes;
  phase.topology = nullptr;
  if (link == Link::kLocal) {
    phase.alpha = in.local_alpha;
    phase.beta = in.local_beta;
    phase.gamma = in.local_gamma;
  }
  return phase;
}

double PhaseCost(K kind, const CostInputs& in, Link link, int ranks, double bytes) {
  if (ranks <= 1) return 0;
  const CostInputs phase = PhaseInputs(in, link, ranks, bytes);
  return CheapestFlat(kind, phase)->cost(phase);
}

// One collective call's view of the layout, and the runner of its phases.
class Hierarchy {
 public:
  Hierarchy(CollectiveContext& ctx, const CollectiveArgs& args)
      : ctx_(ctx),
        args_(args),
        t_(ctx.topology()),
        self_(ctx.rank()),
        host_(t_.HostOf(self_)),
        local_index_(t_.LocalIndex(self_)),
        elem_(args.elem()) {}

  const Topology& topology() const { return t_; }
  int self() const { return self_; }
  int host() const { return host_; }
  int local_index() const { return local_index_; }
  size_t elem() const { return elem_; }
  const std::vector<int>& Local() const { return t_.ranks_of_host[host_]; }
  bool SlicesFit() const { return t_.Uniform(); }

  // Slice group i: the ranks with local index i, one per host, in host order (slices only).
  std::vector<std::vector<int>> Slices() const {
    std::vector<std::vector<int>> slices(t_.ranks_of_host[0].size());
    for (const std::vector<int>& ranks : t_.ranks_of_host) {
      for (size_t i = 0; i < ranks.size(); ++i) slices[i].push_back(ranks[i]);
    }
    return slices;
  }
  std::vector<int> Slice() const { return Slices()[local_index_]; }

  // Host h's leader: `root` on the root's host, else the host's lowest rank.
  int LeaderOf(int h, int root) const {
    return root >= 0 && t_.HostOf(root) == h ? root : t_.ranks_of_host[h][0];
  }
  std::vector<int> Leaders(int root) const {
    std::vector<int> members;
    for (int h = 0; h < t_.hosts(); ++h) members.push_back(LeaderOf(h, root));
    return members;
  }

  // Arguments of a phase: this call's type, and its op with kAvg summed (the communicator
  // divides once at the end).
  CollectiveArgs Args(K kind, const void* send, void* recv, size_t count, int root = -1) const {
    CollectiveArgs phase;
    phase.kind = kind;
    phase.type = args_.type;
    phase.op = args_.op == ReduceOp::kAvg ? ReduceOp::kSum : args_.op;
    phase.root = root;
    phase.send = send;
    phase.recv = recv;
    phase.count = count;
    return phase;
  }

  // Runs phase `phase` as one flat collective among `members` (communicator ranks in group
  // order, this rank included); `phase_args` are group-relative (root, counts).
  absl::Status Run(int phase, const std::vector<int>& members, Link link,
                   const CollectiveArgs& phase_args) {
    const int ranks = static_cast<int>(members.size());
    if (ranks == 1) {
      CopyOwnBlock(phase_args);
      return absl::OkStatus();
    }
    const CommTuning& tuning = ctx_.tuning();
    const CostInputs in =
        MakeCostInputs(link == Link::kLocal ? tuning.local_cost : tuning.network_cost, ranks,
                       PayloadBytes(phase_args, ranks), tuning.segments);
    const AlgorithmEntry* entry = CheapestFlat(phase_args.kind, in);
    CHORUS_LOG(kDebug, "collectives")
        << ctx_.Describe() << ": phase " << phase + 1 << ", "
        << (link == Link::kLocal ? "within host " : "between hosts, ")
        << (link == Link::kLocal ? absl::StrCat(host_, ", ") : std::string())
        << CollectiveKindName(phase_args.kind) << " by " << AlgorithmName(entry->id)
        << " among ranks " << absl::StrJoin(members, ",");
    GroupView view(ctx_, members, static_cast<uint64_t>(phase) * kPhaseSteps);
    const size_t sends = ctx_.SendsPosted();
    CHORUS_RETURN_IF_ERROR(entry->run(ctx_, phase_args));
    // The next phase may write where this one sent from (a tree returns with its last sends
    // in flight): those sends finish first. Their receivers are in this phase, so this wait
    // depends on nothing a later phase does.
    return ctx_.WaitSendsSince(sends);
  }

  // Ranks in host-grouped order: `groups` one after the other (hosts for leaders, slice
  // groups for slices).
  static std::vector<int> Concat(const std::vector<std::vector<int>>& groups) {
    std::vector<int> order;
    for (const std::vector<int>& group : groups)
      order.insert(order.end(), group.begin(), group.end());
    return order;
  }

  // The per-rank blocks of an allgather(v) or reduce_scatter(v) (`counts`, by rank) laid out
  // in `order` instead of rank order: each rank's element offset in that layout.
  static std::vector<size_t> OffsetsIn(const std::vector<int>& order,
                                       const std::vector<size_t>& counts) {
    std::vector<size_t> at(counts.size());
    size_t offset = 0;
    for (int rank : order) {
      at[rank] = offset;
      offset += counts[rank];
    }
    return at;
  }

  // Copies every rank's block from the layout with offsets `from_at` to the one with `to_at`.
  void Move(const uint8_t* from, const std::vector<size_t>& from_at, uint8_t* to,
            const std::vector<size_t>& to_at, const std::vector<size_t>& counts) const {
    for (size_t rank = 0; rank < counts.size(); ++rank) {
      if (counts[rank] == 0) continue;
      std::memcpy(to + to_at[rank] * elem_, from + from_at[rank] * elem_, counts[rank] * elem_);
    }
  }

  // The element count of each of `groups` (lists of ranks) given per-rank `counts`.
  static std::vector<size_t> Sums(const std::vector<std::vector<int>>& groups,
                                  const std::vector<size_t>& counts) {
    std::vector<size_t> sums;
    for (const std::vector<int>& group : groups) {
      size_t sum = 0;
      for (int rank : group) sum += counts[rank];
      sums.push_back(sum);
    }
    return sums;
  }
  // The counts of `ranks`, in that order.
  static std::vector<size_t> CountsOf(const std::vector<int>& ranks,
                                      const std::vector<size_t>& counts) {
    std::vector<size_t> of;
    for (int rank : ranks) of.push_back(counts[rank]);
    return of;
  }

 private:
  CollectiveContext& ctx_;
  const CollectiveArgs& args_;
  const Topology& t_;
  const int self_;
  const int host_;
  const int local_index_;
  const size_t elem_;
};

}  // namespace

absl::Status HierarchicalAllReduce(CollectiveContext& ctx, const CollectiveArgs& args) {
  Hierarchy h(ctx, args);
  uint8_t* out = static_cast<uint8_t*>(args.recv);
  if (h.SlicesFit()) {
    const std::vector<size_t> counts = EvenCounts(args.count, static_cast<int>(h.Local().size()));
    const size_t mine = counts[h.local_index()];
    uint8_t* slice = out + PackedOffsets(counts)[h.local_index()] * h.elem();
    CollectiveArgs scatter = h.Args(K::kReduceScatterV, args.send, slice, 0);
    scatter.counts = counts;
    CHORUS_RETURN_IF_ERROR(h.Run(0, h.Local(), Link::kLocal, scatter));
    CHORUS_RETURN_IF_ERROR(
        h.Run(1, h.Slice(), Link::kNetwork, h.Args(K::kAllReduce, slice, slice, mine)));
    CollectiveArgs gather = h.Args(K::kAllGatherV, slice, out, 0);
    gather.counts = counts;
    return h.Run(2, h.Local(), Link::kLocal, gather);
  }
  CHORUS_RETURN_IF_ERROR(
      h.Run(0, h.Local(), Link::kLocal, h.Args(K::kReduce, args.send, out, args.count, 0)));
  if (h.local_index() == 0) {
    CHORUS_RETURN_IF_ERROR(
        h.Run(1, h.Leaders(-1), Link::kNetwork, h.Args(K::kAllReduce, out, out, args.count)));
  }
  return h.Run(2, h.Local(), Link::kLocal, h.Args(K::kBroadcast, out, out, args.count, 0));
}

absl::Status HierarchicalBroadcast(CollectiveContext& ctx, const CollectiveArgs& args) {
  Hierarchy h(ctx, args);
  const Topology& t = h.topology();
  uint8_t* out = static_cast<uint8_t*>(args.recv);
  if (h.self() == args.root && args.send != out && args.count > 0) {
    std::memcpy(out, args.send, args.count * h.elem());
  }
  const int leader = h.LeaderOf(h.host(), args.root);
  if (h.self() == leader) {
    CHORUS_RETURN_IF_ERROR(h.Run(0, h.Leaders(args.root), Link::kNetwork,
                                 h.Args(K::kBroadcast, out, out, args.count, t.HostOf(args.root))));
  }
  return h.Run(1, h.Local(), Link::kLocal,
               h.Args(K::kBroadcast, out, out, args.count, t.LocalIndex(leader)));
}

absl::Status HierarchicalReduce(CollectiveContext& ctx, const CollectiveArgs& args) {
  Hierarchy h(ctx, args);
  const Topology& t = h.topology();
  const int leader = h.LeaderOf(h.host(), args.root);
  const bool is_root = h.self() == args.root;
  // What this host contributes between hosts, on its leader.
  const void* partial = args.send;
  if (h.Local().size() > 1) {
    void* into = is_root ? args.recv : nullptr;
    if (!is_root && h.self() == leader) into = ctx.Scratch(args.count * h.elem());
    CHORUS_RETURN_IF_ERROR(
        h.Run(0, h.Local(), Link::kLocal,
              h.Args(K::kReduce, args.send, into, args.count, t.LocalIndex(leader))));
    partial = into;
  }
  if (h.self() != leader) return absl::OkStatus();
  return h.Run(
      1, h.Leaders(args.root), Link::kNetwork,
      h.Args(K::kReduce, partial, is_root ? args.recv : nullptr, args.count, t.HostOf(args.root)));
}

absl::Status HierarchicalAllGather(CollectiveContext& ctx, const CollectiveArgs& args) {
  Hierarchy h(ctx, args);
  const Topology& t = h.topology();
  const std::vector<size_t> counts = RankBlocks(args, t.size());
  const std::vector<size_t> rank_at = PackedOffsets(counts);
  const size_t elem = h.elem();
  uint8_t* out = static_cast<uint8_t*>(args.recv);
  const size_t own = counts[h.self()];
  // The gathered array in host-grouped order, moved into rank order at the end.
  uint8_t* grouped = ctx.Scratch(rank_at.back() * elem);
  if (h.SlicesFit()) {
    const std::vector<std::vector<int>> slices = h.Slices();
    const std::vector<int>& slice = slices[h.local_index()];
    const std::vector<size_t> at = Hierarchy::OffsetsIn(Hierarchy::Concat(slices), counts);
    // Slice group i's blocks land where local rank i's contribution to the second phase is.
    uint8_t* mine = grouped + at[slice[0]] * elem;
    CollectiveArgs between = h.Args(K::kAllGatherV, args.send, mine, own);
    between.counts = Hierarchy::CountsOf(slice, counts);
    CHORUS_RETURN_IF_ERROR(h.Run(0, slice, Link::kNetwork, between));
    CollectiveArgs within = h.Args(K::kAllGatherV, mine, grouped, 0);
    within.counts = Hierarchy::Sums(slices, counts);
    CHORUS_RETURN_IF_ERROR(h.Run(1, h.Local(), Link::kLocal, within));
    h.Move(grouped, at, out, rank_at, counts);
    return absl::OkStatus();
  }
  const std::vector<size_t> at = Hierarchy::OffsetsIn(Hierarchy::Concat(t.ranks_of_host), counts);
  const bool leader = h.local_index() == 0;
  uint8_t* host_blocks = grouped + at[h.Local()[0]] * elem;
  CollectiveArgs gather = h.Args(K::kGatherV, args.send, leader ? host_blocks : nullptr, own, 0);
  gather.counts = Hierarchy::CountsOf(h.Local(), counts);
  gather.displs = PackedOffsets(gather.counts);
  gather.displs.pop_back();
  CHORUS_RETURN_IF_ERROR(h.Run(0, h.Local(), Link::kLocal, gather));
  if (leader) {
    CollectiveArgs between = h.Args(K::kAllGatherV, host_blocks, grouped, 0);
    between.counts = Hierarchy::Sums(t.ranks_of_host, counts);
    CHORUS_RETURN_IF_ERROR(h.Run(1, h.Leaders(-1), Link::kNetwork, between));
  }
  CHORUS_RETURN_IF_ERROR(h.Run(2, h.Local(), Link::kLocal,
                               h.Args(K::kBroadcast, grouped, grouped, rank_at.back(), 0)));
  h.Move(grouped, at, out, rank_at, counts);
  return absl::OkStatus();
}

absl::Status HierarchicalReduceScatter(CollectiveContext& ctx, const CollectiveArgs& args) {
  Hierarchy h(ctx, args);
  const Topology& t = h.topology();
  const std::vector<size_t> counts = RankBlocks(args, t.size());
  const std::vector<size_t> rank_at = PackedOffsets(counts);
  const size_t elem = h.elem();
  const uint8_t* in = static_cast<const uint8_t*>(args.send);
  const size_t own = counts[h.self()];
  // This rank's input in host-grouped order; the phases reduce it in place.
  uint8_t* grouped = ctx.Scratch(rank_at.back() * elem);
  if (h.SlicesFit()) {
    const std::vector<std::vector<int>> slices = h.Slices();
    const std::vector<int>& slice = slices[h.local_index()];
    const std::vector<size_t> at = Hierarchy::OffsetsIn(Hierarchy::Concat(slices), counts);
    h.Move(in, rank_at, grouped, at, counts);
    uint8_t* mine = grouped + at[slice[0]] * elem;
    CollectiveArgs within = h.Args(K::kReduceScatterV, grouped, mine, 0);
    within.counts = Hierarchy::Sums(slices, counts);
    CHORUS_RETURN_IF_ERROR(h.Run(0, h.Local(), Link::kLocal, within));
    CollectiveArgs between = h.Args(K::kReduceScatterV, mine, args.recv, 0);
    between.counts = Hierarchy::CountsOf(slice, counts);
    return h.Run(1, slice, Link::kNetwork, between);
  }
  const std::vector<size_t> at = Hierarchy::OffsetsIn(Hierarchy::Concat(t.ranks_of_host), counts);
  h.Move(in, rank_at, grouped, at, counts);
  const bool leader = h.local_index() == 0;
  CHORUS_RETURN_IF_ERROR(
      h.Run(0, h.Local(), Link::kLocal,
            h.Args(K::kReduce, grouped, leader ? grouped : nullptr, rank_at.back(), 0)));
  uint8_t* host_blocks = grouped + at[h.Local()[0]] * elem;
  if (leader) {
    CollectiveArgs between = h.Args(K::kReduceScatterV, grouped, host_blocks, 0);
    between.counts = Hierarchy::Sums(t.ranks_of_host, counts);
    CHORUS_RETURN_IF_ERROR(h.Run(1, h.Leaders(-1), Link::kNetwork, between));
  }
  CollectiveArgs scatter = h.Args(K::kScatterV, leader ? host_blocks : nullptr, args.recv, own, 0);
  scatter.send_counts = Hierarchy::CountsOf(h.Local(), counts);
  scatter.send_displs = PackedOffsets(scatter.send_counts);
  scatter.send_displs.pop_back();
  return h.Run(2, h.Local(), Link::kLocal, scatter);
}

double HierarchicalCost(CollectiveKind kind, const CostInputs& in) {
  const Topology flat =
      in.topology == nullptr ? Topology::Flat(std::max(1, static_cast<int>(in.ranks))) : Topology();
  const Topology& t = in.topology == nullptr ? flat : *in.topology;
  const int hosts = t.hosts();
  int local = 0;  // the largest host
  for (const std::vector<int>& ranks : t.ranks_of_host) {
    local = std::max(local, static_cast<int>(ranks.size()));
  }
  const bool slices = t.Uniform();
  const double n = in.bytes;
  const double share = n * local / std::max(1, t.size());  // the largest host's blocks
  const double reorder = n * in.local_beta;                // one copy through scratch
  switch (kind) {
    case K::kAllReduce:
      if (slices) {
        return PhaseCost(K::kReduceScatterV, in, Link::kLocal, local, n) +
               PhaseCost(K::kAllReduce, in, Link::kNetwork, hosts, n / local) +
               PhaseCost(K::kAllGatherV, in, Link::kLocal, local, n);
      }
      return PhaseCost(K::kReduce, in, Link::kLocal, local, n) +
             PhaseCost(K::kAllReduce, in, Link::kNetwork, hosts, n) +
             PhaseCost(K::kBroadcast, in, Link::kLocal, local, n);
    case K::kBroadcast:
      return PhaseCost(K::kBroadcast, in, Link::kNetwork, hosts, n) +
             PhaseCost(K::kBroadcast, in, Link::kLocal, local, n);
    case K::kReduce:
      return PhaseCost(K::kReduce, in, Link::kLocal, local, n) +
             PhaseCost(K::kReduce, in, Link::kNetwork, hosts, n);
    case K::kAllGather:
    case K::kAllGatherV:
      if (slices) {
        return PhaseCost(K::kAllGatherV, in, Link::kNetwork, hosts, n / local) +
               PhaseCost(K::kAllGatherV, in, Link::kLocal, local, n) + reorder;
      }
      return PhaseCost(K::kGatherV, in, Link::kLocal, local, share) +
             PhaseCost(K::kAllGatherV, in, Link::kNetwork, hosts, n) +
             PhaseCost(K::kBroadcast, in, Link::kLocal, local, n) + reorder;
    case K::kReduceScatter:
    case K::kReduceScatterV:
      if (slices) {
        return reorder + PhaseCost(K::kReduceScatterV, in, Link::kLocal, local, n) +
               PhaseCost(K::kReduceScatterV, in, Link::kNetwork, hosts, n / local);
      }
      return reorder + PhaseCost(K::kReduce, in, Link::kLocal, local, n) +
             PhaseCost(K::kReduceScatterV, in, Link::kNetwork, hosts, n) +
             PhaseCost(K::kScatterV, in, Link::kLocal, local, share);
    default:
      return 0;
  }
}

}  // namespace chorus
