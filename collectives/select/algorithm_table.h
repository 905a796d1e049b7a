// The table of algorithms: which collective each implements, the function that runs it, and
// its alpha-beta-gamma cost. The selector (selector.h) reads this table; nothing else decides
// which algorithms exist.
#ifndef CHORUS_COLLECTIVES_SELECT_ALGORITHM_TABLE_H_
#define CHORUS_COLLECTIVES_SELECT_ALGORITHM_TABLE_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "chorus/collectives/collective_args.h"
#include "chorus/collectives/collective_kind.h"
#include "chorus/collectives/engine/context.h"
#include "chorus/collectives/engine/topology.h"
#include "chorus/collectives/options.h"

namespace chorus {

// Inputs of a cost formula; times in microseconds.
struct CostInputs {
  double ranks = 1;               // p
  double bytes = 0;               // n: the collective's size as PayloadBytes (shape.h) reports it
  double alpha = 0;               // per message
  double beta = 0;                // per byte on the wire
  double gamma = 0;               // per byte reduced
  double ring_segment_bytes = 0;  // pipeline segments (PipelineSegments)
  double tree_segment_bytes = 0;  // ... a tree's of p ranks (PipelineSegments::TreeBytes)
  // The ranks copy what they send on fewer cores than there are ranks, so transfers that run at
  // once take turns (LinkProfile::copies_on_rank_cores, on a host the ranks oversubscribe).
  bool cores_shared = false;
  // For the hierarchical algorithm, whose phases run within and between hosts: the layout
  // (null: one host of `ranks`) and the link costs within a host (alpha, beta and gamma above
  // are those between hosts).
  const Topology* topology = nullptr;
  double local_alpha = 0;
  double local_beta = 0;
  double local_gamma = 0;
};

// `cost` in the formulas' units, for `ranks` ranks and `bytes` bytes; local costs = `cost`.
CostInputs MakeCostInputs(const CostParams& cost, int ranks, size_t bytes,
                          const PipelineSegments& segments);

using AlgorithmFn = absl::Status (*)(CollectiveContext& ctx, const CollectiveArgs& args);
using CostFn = double (*)(const CostInputs& in);

struct AlgorithmEntry {
  CollectiveKind kind;
  AlgorithmId id;
  AlgorithmFn run;
  CostFn cost;  // estimated microseconds
  // Where a rank gets its data from on the header ring, for algorithms that can tell
  // (CollectiveContext::Start); null for the others.
  FeederFn feeder = nullptr;
};

// Every (collective, algorithm) pair, in order of preference when costs tie.
absl::Span<const AlgorithmEntry> AlgorithmTable();

// The entry for (kind, id), or nullptr if that algorithm does not implement that collective.
const AlgorithmEntry* FindAlgorithm(CollectiveKind kind, AlgorithmId id);

// The algorithms that implement `kind`.
std::vector<AlgorithmId> AlgorithmsFor(CollectiveKind kind);

// The cheapest algorithm for `kind` under `in` other than the hierarchical one and cuda_ipc
// (the first in table order on a tie); nullptr if none implements `kind`. The selector's model,
// and how the hierarchical algorithm picks each phase's algorithm.
const AlgorithmEntry* CheapestFlat(CollectiveKind kind, const CostInputs& in);

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_SELECT_ALGORITHM_TABLE_H_
