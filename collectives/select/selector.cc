#include "chorus/collectives/select/selector.h"

#include <atomic>
#include <limits>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "chorus/collectives/algorithms/algorithms.h"
#include "chorus/collectives/shape.h"
#include "chorus/core/env.h"
#include "chorus/core/status.h"

namespace chorus {
namespace {

std::string KnownFor(CollectiveKind kind) {
  std::vector<std::string> names;
  for (AlgorithmId id : AlgorithmsFor(kind)) names.emplace_back(AlgorithmName(id));
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<AlgorithmRule> ParseRule(CollectiveKind kind, absl::string_view text) {
  absl::string_view range;
  absl::string_view name;
  if (size_t at = text.find(":@"); at != absl::string_view::npos) {
    range = text.substr(0, at);
    name = text.substr(at + 2);
  } else if (size_t eq = text.find('='); eq != absl::string_view::npos) {
    range = text.substr(0, eq);
    name = text.substr(eq + 1);
  } else {
    return InvalidArgumentError(
        absl::StrCat("algorithm rule '", text, "' needs the form lo-hi=algorithm"));
  }
  const size_t dash = range.find('-');
  if (dash == absl::string_view::npos) {
    return InvalidArgumentError(
        absl::StrCat("size range '", range, "' in rule '", text, "' needs the form lo-hi"));
  }
  CHORUS_ASSIGN_OR_RETURN(const int64_t lo, ParseBytes(range.substr(0, dash)));
  CHORUS_ASSIGN_OR_RETURN(const int64_t hi, ParseBytes(range.substr(dash + 1)));
  if (lo >= hi) {
    return InvalidArgumentError(absl::StrCat("size range '", range, "' in rule '", text,
                                             "' is empty (the upper bound is exclusive)"));
  }
  CHORUS_ASSIGN_OR_RETURN(const AlgorithmId id, ParseAlgorithmName(name));
  if (FindAlgorithm(kind, id) == nullptr) {
    return InvalidArgumentError(absl::StrCat("algorithm '", AlgorithmName(id),
                                             "' does not implement ", CollectiveKindName(kind),
                                             "; choose one of: ", KnownFor(kind)));
  }
  return AlgorithmRule{kind, lo, hi, id};
}

}  // namespace

absl::StatusOr<std::vector<AlgorithmRule>> ParseAlgorithmRules(absl::string_view text) {
  std::vector<AlgorithmRule> rules;
  for (absl::string_view section : absl::StrSplit(text, absl::ByAnyChar(";#"))) {
    section = absl::StripAsciiWhitespace(section);
    if (section.empty()) continue;
    const size_t colon = section.find(':');
    if (colon == absl::string_view::npos) {
      return InvalidArgumentError(
          absl::StrCat("algorithm rules section '", section,
                       "' needs the form collective:lo-hi=algorithm[,lo-hi=algorithm...]"));
    }
    CHORUS_ASSIGN_OR_RETURN(const CollectiveKind kind,
                            ParseCollectiveKind(section.substr(0, colon)));
    for (absl::string_view rule : absl::StrSplit(section.substr(colon + 1), ',')) {
      rule = absl::StripAsciiWhitespace(rule);
      if (rule.empty()) continue;
      CHORUS_ASSIGN_OR_RETURN(AlgorithmRule parsed, ParseRule(kind, rule));
      rules.push_back(parsed);
    }
  }
  return rules;
}

absl::StatusOr<CostParams> ParseCostParams(absl::string_view text) {
  CostParams params;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, '=');
    const absl::string_view key = absl::StripAsciiWhitespace(kv.first);
    double value = 0;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(kv.second), &value) || value <= 0) {
      return InvalidArgumentError(
          absl::StrCat("cost parameter '", item, "' needs a positive number, e.g. alpha_us=25"));
    }
    if (key == "alpha_us") {
      params.alpha_us = value;
    } else if (key == "beta_ns") {
      params.beta_ns_per_byte = value;
    } else if (key == "gamma_ns") {
      params.gamma_ns_per_byte = value;
    } else {
      return InvalidArgumentError(
          absl::StrCat("unknown cost parameter '", key, "'; known: alpha_us, beta_ns, gamma_ns"));
    }
  }
  return params;
}

CostParams LinkCost(const LinkProfile& link) {
  return {link.alpha_us, link.beta_ns_per_byte, link.gamma_ns_per_byte};
}

namespace {

CostParams Completed(CostParams params, const CostParams& defaults) {
  if (params.alpha_us <= 0) params.alpha_us = defaults.alpha_us;
  if (params.beta_ns_per_byte <= 0) params.beta_ns_per_byte = defaults.beta_ns_per_byte;
  if (params.gamma_ns_per_byte <= 0) params.gamma_ns_per_byte = defaults.gamma_ns_per_byte;
  return params;
}

}  // namespace

namespace {

// The model's choice is a pure function of (selector, collective, ranks, bytes), and programs
// repeat their sizes (a training step's buckets), so each thread keeps the latest choices in a
// small direct-mapped table instead of pricing every algorithm again (log2, exp2 and segment
// arithmetic per candidate) on every call. Per thread, so that lookups take no lock; entries
// name their selector by a unique id, never reused, so one that was destroyed cannot match.
struct ModelMemo {
  uint64_t selector = 0;  // 0: empty
  CollectiveKind kind = CollectiveKind::kBarrier;
  int ranks = 0;
  size_t bytes = 0;
  const AlgorithmEntry* entry = nullptr;
};
constexpr size_t kModelMemoSlots = 64;
// On the heap, one table per thread: thread-local storage holds only the pointer. 2 KiB of
// thread-locals would not fit the static TLS that glibc reserves for libraries loaded with
// dlopen (libchorus's Abseil needs static TLS), which is how a framework loads a plugin.
thread_local std::unique_ptr<ModelMemo[]> model_memo;
std::atomic<uint64_t> next_selector_id{1};

}  // namespace

Selector::Selector(std::vector<AlgorithmRule> rules, CostParams cost, PipelineSegments segments,
                   Topology topology, CostParams local_cost, bool shared_slots, bool cores_shared)
    : id_(next_selector_id.fetch_add(1, std::memory_order_relaxed)),
      rules_(std::move(rules)),
      cost_(cost),
      local_cost_(Completed(local_cost, cost)),
      segments_(segments),
      topology_(std::move(topology)),
      shared_slots_(shared_slots),
      cores_shared_(cores_shared) {
  for (size_t kind = 0; kind < slot_entries_.size(); ++kind) {
    slot_entries_[kind] =
        FindAlgorithm(static_cast<CollectiveKind>(kind), AlgorithmId::kSharedSlots);
  }
}

CostInputs Selector::Inputs(int ranks, size_t bytes) const {
  CostInputs in = MakeCostInputs(cost_, ranks, bytes, segments_);
  const CostInputs local = MakeCostInputs(local_cost_, ranks, bytes, segments_);
  in.local_alpha = local.alpha;
  in.local_beta = local.beta;
  in.local_gamma = local.gamma;
  in.cores_shared = cores_shared_;
  if (topology_.size() == ranks) in.topology = &topology_;
  return in;
}

double Selector::EstimateMicros(const AlgorithmEntry& entry, int ranks, size_t bytes) const {
  return entry.cost(Inputs(ranks, bytes));
}

absl::StatusOr<const AlgorithmEntry*> Selector::Choose(const CollectiveArgs& args, int ranks,
                                                       absl::string_view forced) const {
  if (!forced.empty()) {
    CHORUS_ASSIGN_OR_RETURN(const AlgorithmId id, ParseAlgorithmName(forced));
    const AlgorithmEntry* entry = FindAlgorithm(args.kind, id);
    if (entry == nullptr) {
      return InvalidArgumentError(absl::StrCat("algorithm '", forced, "' does not implement ",
                                               CollectiveKindName(args.kind),
                                               "; choose one of: ", KnownFor(args.kind)));
    }
    if (id == AlgorithmId::kSharedSlots) {
      CHORUS_RETURN_IF_ERROR(SharedSlotsRefusal(CollectiveKindName(args.kind), args.kind,
                                                shared_slots_, PayloadBytes(args, ranks)));
    }
    return entry;
  }
  const size_t bytes = PayloadBytes(args, ranks);
  const int64_t size = bytes > static_cast<size_t>(std::numeric_limits<int64_t>::max())
                           ? std::numeric_limits<int64_t>::max()
                           : static_cast<int64_t>(bytes);
  for (const AlgorithmRule& rule : rules_) {
    if (rule.kind == args.kind && size >= rule.min_bytes && size < rule.max_bytes) {
      // A rule may name the slots for calls they cannot carry: refused like a named call,
      // before the call is numbered, rather than breaking the communicator when it runs.
      if (rule.algorithm == AlgorithmId::kSharedSlots) {
        CHORUS_RETURN_IF_ERROR(
            SharedSlotsRefusal(CollectiveKindName(args.kind), args.kind, shared_slots_, bytes));
      }
      return FindAlgorithm(rule.kind, rule.algorithm);
    }
  }
  // No message beats a store and a load of shared memory: where the shared slots carry the
  // call, no model is asked. (Allreduce and broadcast in the shared buffers also beat the
  // message algorithms up to the buffer's size, waiting for the peers once or twice instead of
  // rounds of messages; benchmarks.md.)
  if (shared_slots_ && bytes <= SharedSlotsLimit(args.kind)) {
    if (const AlgorithmEntry* slots = slot_entries_[static_cast<size_t>(args.kind)]) return slots;
  }
  const AlgorithmEntry* best = ModelChoice(args.kind, ranks, bytes);
  if (best == nullptr) {
    return InvalidArgumentError(
        absl::StrCat("no algorithm implements ", CollectiveKindName(args.kind)));
  }
  return best;
}

const AlgorithmEntry* Selector::ModelChoice(CollectiveKind kind, int ranks, size_t bytes) const {
  const size_t slot =
      (bytes * 0x9e3779b97f4a7c15ull ^ static_cast<size_t>(kind) * 31 ^ ranks) % kModelMemoSlots;
  if (model_memo == nullptr) model_memo.reset(new ModelMemo[kModelMemoSlots]());
  ModelMemo& memo = model_memo[slot];
  if (memo.selector == id_ && memo.kind == kind && memo.ranks == ranks && memo.bytes == bytes) {
    return memo.entry;
  }
  const CostInputs in = Inputs(ranks, bytes);
  const AlgorithmEntry* best = CheapestFlat(kind, in);
  if (topology_.size() == ranks && topology_.IsHierarchical()) {
    const AlgorithmEntry* hierarchical = FindAlgorithm(kind, AlgorithmId::kHierarchical);
    if (hierarchical != nullptr && (best == nullptr || hierarchical->cost(in) < best->cost(in))) {
      best = hierarchical;
    }
  }
  memo = ModelMemo{id_, kind, ranks, bytes, best};
  return best;
}

}  // namespace chorus
