#include "chorus/collectives/select/algorithm_table.h"

#include <algorithm>
#include <cmath>

#include "chorus/collectives/algorithms/algorithms.h"

namespace chorus {
namespace {

using K = CollectiveKind;
using A = AlgorithmId;

// ceil(log2 p)
double Log2(const CostInputs& in) { return std::ceil(std::log2(std::max(in.ranks, 1.0))); }
// The share of the array a rank sends in a bandwidth-optimal algorithm: (p-1)/p.
double Share(const CostInputs& in) { return (in.ranks - 1) / in.ranks; }
// Steps of a recursive algorithm's core: floor(log2 p), since it runs over the largest power
// of two at most p once the other ranks have folded in.
double CoreSteps(const CostInputs& in) { return std::floor(std::log2(std::max(in.ranks, 1.0))); }
// 1 when p is not a power of two: the recursive algorithms fold and unfold.
double Folds(const CostInputs& in) {
  const double p = in.ranks;
  return std::exp2(std::floor(std::log2(std::max(p, 1.0)))) == p ? 0 : 1;
}
// Filling a pipeline costs segments' transfer before the stream flows: one for a ring; for a
// tree, one stage (a segment at `per_byte`) per link of its longest chain after the first,
// since the array's own term already streams it over one link.
double RingFill(const CostInputs& in) {
  return std::min(in.bytes, in.ring_segment_bytes) * in.beta;
}
double TreeFill(const CostInputs& in, double chain_links, double per_byte) {
  return (chain_links - 1) * std::min(in.bytes, in.tree_segment_bytes) * per_byte;
}
// What a broadcast or reduce tree's transfers cost, `per_byte` for each byte it moves over a
// link. The double binary tree pipelines: it streams the array once, past a fill. On cores the
// ranks share (CostInputs::cores_shared) its levels and halves take turns as the binomial
// tree's levels do, so it costs as much as that tree, and more messages: on 3-8 ranks of a
// 2-core host it took up to 2.5x the binomial tree's time (docs/collectives.md, "Trees on
// shared cores", which also shows the sizes where it did not).
double TreeTransfers(const CostInputs& in, double per_byte) {
  if (in.cores_shared) return Log2(in) * in.bytes * per_byte;
  return in.bytes * per_byte + TreeFill(in, Log2(in), per_byte);
}
// cuda_ipc: its rounds of small messages to every peer (the data never crosses a link).
double IpcRounds(const CostInputs& in, double rounds) { return rounds * (in.ranks - 1) * in.alpha; }
double TwoIpcRounds(const CostInputs& in) { return IpcRounds(in, 2); }
// shared_slots: a cache line from each peer, a small fraction of a message's latency.
double SlotLoads(const CostInputs& in) { return 0.1 * (in.ranks - 1) * in.alpha; }

// Formulas (n bytes, p ranks, L = ceil(log2 p), a/b/g = alpha/beta/gamma; the recursive
// algorithms that fold use floor(log2 p) core steps plus the fold); see
// docs/collectives.md. Segmented rings overlap the reduction with the wire, so their
// reduction term only counts where gamma exceeds beta.
const AlgorithmEntry kTable[] = {
    // allreduce
    {K::kAllReduce, A::kRecursiveDoubling, RecursiveDoublingAllReduce,
     [](const CostInputs& in) {
       return CoreSteps(in) * (in.alpha + in.bytes * (in.beta + in.gamma)) +
              Folds(in) * (2 * in.alpha + in.bytes * (2 * in.beta + in.gamma));
     }},
    {K::kAllReduce, A::kRing, RingAllReduce,
     [](const CostInputs& in) {
       return 2 * (in.ranks - 1) * in.alpha + 2 * Share(in) * in.bytes * in.beta +
              Share(in) * in.bytes * std::max(0.0, in.gamma - in.beta) + RingFill(in);
     }},
    {K::kAllReduce, A::kRabenseifner, RabenseifnerAllReduce,
     [](const CostInputs& in) {
       return 2 * CoreSteps(in) * in.alpha + Share(in) * in.bytes * (2 * in.beta + in.gamma) +
              Folds(in) * (2 * in.alpha + in.bytes * (2 * in.beta + in.gamma));
     }},
    {K::kAllReduce, A::kDoubleBinaryTree, DoubleTreeAllReduce,
     [](const CostInputs& in) {
       return 2 * (Log2(in) + 1) * in.alpha + in.bytes * (2 * in.beta + in.gamma) +
              TreeFill(in, 2 * Log2(in), in.beta);
     }},
    {K::kAllReduce, A::kBinomial, BinomialAllReduce,
     [](const CostInputs& in) {
       return 2 * Log2(in) * (in.alpha + in.bytes * in.beta) + Log2(in) * in.bytes * in.gamma;
     }},
    // broadcast
    {K::kBroadcast, A::kBinomial, BinomialBroadcast,
     [](const CostInputs& in) { return Log2(in) * (in.alpha + in.bytes * in.beta); },
     BinomialFeeder},
    {K::kBroadcast, A::kDoubleBinaryTree, DoubleTreeBroadcast,
     [](const CostInputs& in) { return (Log2(in) + 1) * in.alpha + TreeTransfers(in, in.beta); }},
    // reduce
    {K::kReduce, A::kBinomial, BinomialReduce,
     [](const CostInputs& in) { return Log2(in) * (in.alpha + in.bytes * (in.beta + in.gamma)); }},
    {K::kReduce, A::kDoubleBinaryTree, DoubleTreeReduce,
     [](const CostInputs& in) {
       return (Log2(in) + 1) * in.alpha + TreeTransfers(in, in.beta + in.gamma);
     }},
    // allgather(v)
    {K::kAllGather, A::kRecursiveDoubling, RecursiveDoublingAllGather,
     [](const CostInputs& in) {
       return CoreSteps(in) * in.alpha + Share(in) * in.bytes * in.beta +
              Folds(in) * (2 * in.alpha + in.bytes * in.beta);
     }},
    {K::kAllGather, A::kRing, RingAllGather,
     [](const CostInputs& in) {
       return (in.ranks - 1) * in.alpha + Share(in) * in.bytes * in.beta;
     }},
    {K::kAllGatherV, A::kRecursiveDoubling, RecursiveDoublingAllGather,
     [](const CostInputs& in) {
       return CoreSteps(in) * in.alpha + Share(in) * in.bytes * in.beta +
              Folds(in) * (2 * in.alpha + in.bytes * in.beta);
     }},
    {K::kAllGatherV, A::kRing, RingAllGather,
     [](const CostInputs& in) {
       return (in.ranks - 1) * in.alpha + Share(in) * in.bytes * in.beta;
     }},
    // reduce_scatter(v)
    {K::kReduceScatter, A::kRabenseifner, RabenseifnerReduceScatter,
     [](const CostInputs& in) {
       return CoreSteps(in) * in.alpha + Share(in) * in.bytes * (in.beta + in.gamma) +
              Folds(in) * (2 * in.alpha + in.bytes * (in.beta + in.gamma));
     }},
    {K::kReduceScatter, A::kRing, RingReduceScatter,
     [](const CostInputs& in) {
       return (in.ranks - 1) * in.alpha + Share(in) * in.bytes * std::max(in.beta, in.gamma) +
              RingFill(in);
     }},
    {K::kReduceScatterV, A::kRabenseifner, RabenseifnerReduceScatter,
     [](const CostInputs& in) {
       return CoreSteps(in) * in.alpha + Share(in) * in.bytes * (in.beta + in.gamma) +
              Folds(in) * (2 * in.alpha + in.bytes * (in.beta + in.gamma));
     }},
    {K::kReduceScatterV, A::kRing, RingReduceScatter,
     [](const CostInputs& in) {
       return (in.ranks - 1) * in.alpha + Share(in) * in.bytes * std::max(in.beta, in.gamma) +
              RingFill(in);
     }},
    // gather, scatter, alltoall (one algorithm each) and barrier
    {K::kGather, A::kLinear, LinearGather,
     [](const CostInputs& in) {
       return (in.ranks - 1) * in.alpha + Share(in) * in.bytes * in.beta;
     }},
    {K::kGatherV, A::kLinear, LinearGather,
     [](const CostInputs& in) {
       return (in.ranks - 1) * in.alpha + Share(in) * in.bytes * in.beta;
     }},
    {K::kScatter, A::kLinear, LinearScatter,
     [](const CostInputs& in) {
       return (in.ranks - 1) * in.alpha + Share(in) * in.bytes * in.beta;
     }},
    {K::kScatterV, A::kLinear, LinearScatter,
     [](const CostInputs& in) {
       return (in.ranks - 1) * in.alpha + Share(in) * in.bytes * in.beta;
     }},
    {K::kAllToAll, A::kPairwise, PairwiseAllToAll,
     [](const CostInputs& in) {
       return (in.ranks - 1) * in.alpha + Share(in) * in.bytes * in.beta;
     }},
    {K::kAllToAllV, A::kPairwise, PairwiseAllToAll,
     [](const CostInputs& in) {
       return (in.ranks - 1) * in.alpha + Share(in) * in.bytes * in.beta;
     }},
    {K::kBarrier, A::kDissemination, DisseminationBarrier,
     [](const CostInputs& in) { return Log2(in) * in.alpha; }},
    // CUDA device buffers on one host only, named by the communicator, never chosen by cost
    // (CheapestFlat skips it): two or three rounds of messages; the data never crosses a link.
    {K::kAllReduce, A::kCudaIpc, CudaIpcAllReduce,
     [](const CostInputs& in) { return IpcRounds(in, 3); }},
    {K::kReduce, A::kCudaIpc, CudaIpcReduce, TwoIpcRounds},
    {K::kReduceScatter, A::kCudaIpc, CudaIpcReduceScatter, TwoIpcRounds},
    {K::kReduceScatterV, A::kCudaIpc, CudaIpcReduceScatter, TwoIpcRounds},
    {K::kBroadcast, A::kCudaIpc, CudaIpcMove, TwoIpcRounds},
    {K::kAllGather, A::kCudaIpc, CudaIpcMove, TwoIpcRounds},
    {K::kAllGatherV, A::kCudaIpc, CudaIpcMove, TwoIpcRounds},
    {K::kGather, A::kCudaIpc, CudaIpcMove, TwoIpcRounds},
    {K::kGatherV, A::kCudaIpc, CudaIpcMove, TwoIpcRounds},
    {K::kScatter, A::kCudaIpc, CudaIpcMove, TwoIpcRounds},
    {K::kScatterV, A::kCudaIpc, CudaIpcMove, TwoIpcRounds},
    {K::kAllToAll, A::kCudaIpc, CudaIpcMove, TwoIpcRounds},
    {K::kAllToAllV, A::kCudaIpc, CudaIpcMove, TwoIpcRounds},
    // Ranks that share memory only, chosen by the selector for every call small enough
    // (CheapestFlat skips it): one store and a load per peer, no message.
    {K::kAllReduce, A::kSharedSlots, SharedSlotsCall, SlotLoads},
    {K::kBroadcast, A::kSharedSlots, SharedSlotsCall, SlotLoads},
    {K::kBarrier, A::kSharedSlots, SharedSlotsCall, SlotLoads},
    // hierarchical: the sum of its phases' cheapest flat costs (hierarchical.cc)
    {K::kAllReduce, A::kHierarchical, HierarchicalAllReduce,
     [](const CostInputs& in) { return HierarchicalCost(K::kAllReduce, in); }},
    {K::kBroadcast, A::kHierarchical, HierarchicalBroadcast,
     [](const CostInputs& in) { return HierarchicalCost(K::kBroadcast, in); }},
    {K::kReduce, A::kHierarchical, HierarchicalReduce,
     [](const CostInputs& in) { return HierarchicalCost(K::kReduce, in); }},
    {K::kAllGather, A::kHierarchical, HierarchicalAllGather,
     [](const CostInputs& in) { return HierarchicalCost(K::kAllGather, in); }},
    {K::kAllGatherV, A::kHierarchical, HierarchicalAllGather,
     [](const CostInputs& in) { return HierarchicalCost(K::kAllGatherV, in); }},
    {K::kReduceScatter, A::kHierarchical, HierarchicalReduceScatter,
     [](const CostInputs& in) { return HierarchicalCost(K::kReduceScatter, in); }},
    {K::kReduceScatterV, A::kHierarchical, HierarchicalReduceScatter,
     [](const CostInputs& in) { return HierarchicalCost(K::kReduceScatterV, in); }},
};

}  // namespace

absl::Span<const AlgorithmEntry> AlgorithmTable() { return kTable; }

const AlgorithmEntry* FindAlgorithm(CollectiveKind kind, AlgorithmId id) {
  for (const AlgorithmEntry& entry : kTable) {
    if (entry.kind == kind && entry.id == id) return &entry;
  }
  return nullptr;
}

CostInputs MakeCostInputs(const CostParams& cost, int ranks, size_t bytes,
                          const PipelineSegments& segments) {
  CostInputs in;
  in.ranks = ranks;
  in.bytes = static_cast<double>(bytes);
  in.alpha = cost.alpha_us;
  in.beta = cost.beta_ns_per_byte / 1000.0;
  in.gamma = cost.gamma_ns_per_byte / 1000.0;
  in.ring_segment_bytes = static_cast<double>(segments.ring_bytes);
  in.tree_segment_bytes = static_cast<double>(segments.TreeBytes(ranks));
  in.local_alpha = in.alpha;
  in.local_beta = in.beta;
  in.local_gamma = in.gamma;
  return in;
}

const AlgorithmEntry* CheapestFlat(CollectiveKind kind, const CostInputs& in) {
  const AlgorithmEntry* best = nullptr;
  double best_cost = 0;
  for (const AlgorithmEntry& entry : kTable) {
    if (entry.kind != kind || entry.id == A::kHierarchical || entry.id == A::kCudaIpc ||
        entry.id == A::kSharedSlots) {
      continue;
    }
    const double cost = entry.cost(in);
    if (best == nullptr || cost < best_cost) {
      best = &entry;
      best_cost = cost;
    }
  }
  return best;
}

std::vector<AlgorithmId> AlgorithmsFor(CollectiveKind kind) {
  std::vector<AlgorithmId> ids;
  for (const AlgorithmEntry& entry : kTable) {
    if (entry.kind == kind) ids.push_back(entry.id);
  }
  return ids;
}

}  // namespace chorus
