// Chooses the algorithm for each call: a per-call choice wins, then the first matching rule
// (CHORUS_ALGO, then CommunicatorOptions::algorithm_rules), then the cheapest candidate of the
// alpha-beta-gamma model in algorithm_table.cc.
//
// Rule grammar (sizes as PayloadBytes (shape.h) reports them, suffixes k/m/g = KiB/MiB/GiB,
// ranges half-open [lo, hi), "inf" for no upper bound):
//
//   rules   := section ((';' | '#') section)*
//   section := collective ':' rule (',' rule)*
//   rule    := lo '-' hi ('=' | ':@') algorithm
//
//   CHORUS_ALGO="allreduce:0-64k=recursive_doubling,64k-inf=ring;broadcast:0-inf=binomial"
//   CHORUS_ALGO="allreduce:0-4k:@recursive_doubling#allreduce:4k-inf:@ring"   (UCC style)
#ifndef CHORUS_COLLECTIVES_SELECT_SELECTOR_H_
#define CHORUS_COLLECTIVES_SELECT_SELECTOR_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chorus/collectives/engine/topology.h"
#include "chorus/collectives/options.h"
#include "chorus/collectives/select/algorithm_table.h"

namespace chorus {

struct AlgorithmRule {
  CollectiveKind kind;
  int64_t min_bytes;  // inclusive
  int64_t max_bytes;  // exclusive
  AlgorithmId algorithm;
};

// InvalidArgument naming the offending piece of text for anything malformed, and for an
// algorithm that does not implement the collective (listing those that do).
absl::StatusOr<std::vector<AlgorithmRule>> ParseAlgorithmRules(absl::string_view text);

// Parses "alpha_us=25,beta_ns=1.3,gamma_ns=0.1" (any subset; unnamed fields stay 0, meaning
// "the device's default"), the grammar of CHORUS_COLL_COST.
absl::StatusOr<CostParams> ParseCostParams(absl::string_view text);

// The cost-model constants of a link (Device::Links: every device says what its links cost).
CostParams LinkCost(const LinkProfile& link);

// Immutable after construction; thread-safe.
class Selector {
 public:
  // `cost`: link costs between hosts (every field set; all links when there is one host).
  // `topology`: which ranks share a host (empty: unknown, one host); the model considers the
  // hierarchical algorithm only when topology.IsHierarchical(), pricing its phases within a
  // host with `local_cost` (zero fields: `cost`'s) and between hosts with `cost`.
  // `shared_slots`: the communicator holds its mesh's shared slots, on which barrier and
  // allreduce and broadcast of at most kSharedBufferPayloadBytes run (SharedSlotsLimit).
  // `cores_shared`: the ranks copy what they send on fewer cores than there are ranks
  // (CostInputs::cores_shared).
  Selector(std::vector<AlgorithmRule> rules, CostParams cost, PipelineSegments segments,
           Topology topology = {}, CostParams local_cost = {}, bool shared_slots = false,
           bool cores_shared = false);

  // The entry to run. `forced` is a per-call algorithm name (may be empty).
  absl::StatusOr<const AlgorithmEntry*> Choose(const CollectiveArgs& args, int ranks,
                                               absl::string_view forced) const;

  // The model's estimate for one entry, in microseconds. Flat algorithms are priced with the
  // link costs between hosts; the hierarchical one by its phases, on the topology when it has
  // `ranks` ranks, else as one host.
  double EstimateMicros(const AlgorithmEntry& entry, int ranks, size_t bytes) const;

 private:
  CostInputs Inputs(int ranks, size_t bytes) const;
  // The cost model's choice (no rule matched); memoised per thread (see selector.cc).
  const AlgorithmEntry* ModelChoice(CollectiveKind kind, int ranks, size_t bytes) const;

  const uint64_t id_;  // tells this selector's memo entries from another's
  const std::vector<AlgorithmRule> rules_;
  const CostParams cost_;
  const CostParams local_cost_;
  const PipelineSegments segments_;
  const Topology topology_;
  const bool shared_slots_;
  const bool cores_shared_;
  // The shared_slots entry of each collective kind (null where it has none), so that a small
  // call finds it without scanning the table.
  std::array<const AlgorithmEntry*, kNumCollectiveKinds> slot_entries_{};
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_SELECT_SELECTOR_H_
