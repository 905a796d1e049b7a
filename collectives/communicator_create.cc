// How communicators come to be: Create (a new mesh through the store); Split and CreateGroup,
// sub-communicators over views of this one's mesh; Shrink, a new mesh of the survivors.
#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "chorus/collectives/algorithms/algorithms.h"
#include "chorus/collectives/communicator.h"
#include "chorus/collectives/diagnostics/flight_recorder.h"
#include "chorus/collectives/diagnostics/flight_recorder_signal.h"
#include "chorus/collectives/diagnostics/trace.h"
#include "chorus/collectives/engine/comm_state.h"
#include "chorus/collectives/engine/tag.h"
#include "chorus/collectives/engine/worker_pool.h"
#include "chorus/collectives/reduce/reduce_kernels.h"
#include "chorus/collectives/reduce/streaming_sink.h"
#include "chorus/collectives/repeated_call.h"
#include "chorus/collectives/select/selector.h"
#include "chorus/core/deadline.h"
#include "chorus/core/env.h"
#include "chorus/core/host_identity.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/group_generation.h"
#include "chorus/rendezvous/prefix_store.h"
#include "chorus/transport/mesh_view.h"

namespace chorus {

// How often Shrink checks whether a survivor it waits for has gone.
constexpr absl::Duration kShrinkSlice = absl::Milliseconds(50);

// What a communicator needs besides its mesh and store: the options with the environment
// applied, and what they resolve to. Sub-communicators start from their parent's.
struct CommunicatorSettings {
  CommunicatorOptions options;
  int dump_signal = 0;
  std::vector<AlgorithmRule> rules;
  CostParams cost;
};

namespace {

// Settings from CHORUS_* variables override the options' fields.
absl::Status ApplyEnvironment(CommunicatorOptions& options) {
  CHORUS_ASSIGN_OR_RETURN(options.timeout, GetEnvDuration("CHORUS_COLL_TIMEOUT", options.timeout));
  CHORUS_ASSIGN_OR_RETURN(const int64_t threads,
                          GetEnvInt("CHORUS_COLL_THREADS", options.worker_threads, 1, 256));
  options.worker_threads = static_cast<int>(threads);
  CHORUS_ASSIGN_OR_RETURN(
      const int64_t segment,
      GetEnvBytes("CHORUS_COLL_SEGMENT_BYTES", static_cast<int64_t>(options.segment_bytes)));
  options.segment_bytes = static_cast<size_t>(segment);
  CHORUS_ASSIGN_OR_RETURN(
      const int64_t streaming,
      GetEnvBytes("CHORUS_COLL_STREAMING_BYTES", static_cast<int64_t>(options.streaming_bytes)));
  if (streaming < 0) return InvalidArgumentError("CHORUS_COLL_STREAMING_BYTES is negative");
  options.streaming_bytes = static_cast<size_t>(streaming);
  CHORUS_ASSIGN_OR_RETURN(const int64_t pinned,
                          GetEnvBytes("CHORUS_CUDA_PINNED_CACHE_BYTES",
                                      static_cast<int64_t>(options.pinned_cache_bytes)));
  if (pinned < 0) return InvalidArgumentError("CHORUS_CUDA_PINNED_CACHE_BYTES is negative");
  options.pinned_cache_bytes = static_cast<size_t>(pinned);
  CHORUS_ASSIGN_OR_RETURN(const int64_t shared_slots,
                          GetEnvInt("CHORUS_SHARED_SLOTS", options.shared_slots ? 1 : 0, 0, 1));
  options.shared_slots = shared_slots == 1;
  CHORUS_ASSIGN_OR_RETURN(const int64_t cuda_ipc,
                          GetEnvInt("CHORUS_CUDA_IPC", options.cuda_ipc ? 1 : 0, 0, 1));
  options.cuda_ipc = cuda_ipc == 1;
  CHORUS_ASSIGN_OR_RETURN(
      const int64_t ipc_min,
      GetEnvBytes("CHORUS_CUDA_IPC_MIN_BYTES", static_cast<int64_t>(options.cuda_ipc_min_bytes)));
  if (ipc_min < 0) return InvalidArgumentError("CHORUS_CUDA_IPC_MIN_BYTES is negative");
  options.cuda_ipc_min_bytes = static_cast<size_t>(ipc_min);
  CHORUS_ASSIGN_OR_RETURN(const int64_t staging_segment,
                          GetEnvBytes("CHORUS_CUDA_STAGING_SEGMENT_BYTES",
                                      static_cast<int64_t>(options.cuda_staging_segment_bytes)));
  if (staging_segment < 0) {
    return InvalidArgumentError("CHORUS_CUDA_STAGING_SEGMENT_BYTES is negative");
  }
  options.cuda_staging_segment_bytes = static_cast<size_t>(staging_segment);
  CHORUS_ASSIGN_OR_RETURN(const int64_t depth,
                          GetEnvInt("CHORUS_COLL_PIPELINE_DEPTH", options.pipeline_depth, 1, 1024));
  options.pipeline_depth = static_cast<int>(depth);
  CHORUS_ASSIGN_OR_RETURN(
      const int64_t entries,
      GetEnvInt("CHORUS_FLIGHT_RECORDER", options.flight_recorder_entries, 0, 1 << 20));
  options.flight_recorder_entries = static_cast<int>(entries);
  if (std::optional<std::string> text = GetEnv("CHORUS_COLL_COST")) {
    absl::StatusOr<CostParams> cost = ParseCostParams(*text);
    if (!cost.ok()) return Annotate(cost.status(), "CHORUS_COLL_COST");
    if (cost->alpha_us > 0) options.cost.alpha_us = cost->alpha_us;
    if (cost->beta_ns_per_byte > 0) options.cost.beta_ns_per_byte = cost->beta_ns_per_byte;
    if (cost->gamma_ns_per_byte > 0) options.cost.gamma_ns_per_byte = cost->gamma_ns_per_byte;
  }
  return absl::OkStatus();
}

absl::StatusOr<CommunicatorSettings> ResolveSettings(const CommunicatorOptions& given,
                                                     const LinkProfile& remote_link) {
  CommunicatorSettings settings;
  settings.options = given;
  CHORUS_RETURN_IF_ERROR(ApplyEnvironment(settings.options));
  CHORUS_ASSIGN_OR_RETURN(settings.dump_signal,
                          ParseDumpSignal(GetEnv("CHORUS_FLIGHT_RECORDER_SIGNAL").value_or("")));
  if (auto env = GetEnv("CHORUS_ALGO")) {
    auto parsed = ParseAlgorithmRules(*env);
    if (!parsed.ok()) return Annotate(parsed.status(), "CHORUS_ALGO");
    settings.rules = *std::move(parsed);
  }
  auto parsed = ParseAlgorithmRules(settings.options.algorithm_rules);
  if (!parsed.ok()) return Annotate(parsed.status(), "CommunicatorOptions::algorithm_rules");
  settings.rules.insert(settings.rules.end(), parsed->begin(), parsed->end());
  const CostParams& given_cost = settings.options.cost;
  settings.cost = LinkCost(remote_link);
  if (given_cost.alpha_us > 0) settings.cost.alpha_us = given_cost.alpha_us;
  if (given_cost.beta_ns_per_byte > 0) settings.cost.beta_ns_per_byte = given_cost.beta_ns_per_byte;
  if (given_cost.gamma_ns_per_byte > 0) {
    settings.cost.gamma_ns_per_byte = given_cost.gamma_ns_per_byte;
  }
  return settings;
}

// Where a survivor of a Shrink publishes the ranks it excludes.
std::string ExcludedKey(int rank) { return absl::StrCat("excluded/", rank); }

// 64 bits of FNV-1a over a rank list, naming a group in keys and logs.
uint64_t RanksDigest(absl::Span<const int> ranks) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (int rank : ranks) {
    for (int byte = 0; byte < 4; ++byte) {
      hash ^= static_cast<uint32_t>(rank) >> (8 * byte) & 0xff;
      hash *= 0x100000001b3ull;
    }
  }
  return hash;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(
    Store& store, absl::string_view name, Device& device, int rank, int size,
    const CommunicatorOptions& given) {
  if (size < 1 || rank < 0 || rank >= size) {
    return InvalidArgumentError(
        absl::StrCat("communicator '", name, "': rank ", rank, " is not in [0, ", size, ")"));
  }
  if (name.empty()) return InvalidArgumentError("a communicator needs a non-empty name");
  ScopedLogRank log_rank(rank);
  CHORUS_ASSIGN_OR_RETURN(const CommunicatorSettings settings,
                          ResolveSettings(given, device.Links().remote));
  // This creation's keys carry a generation of their own, so a name can be created again
  // once destroyed without a rank ever reading the previous communicator's addresses.
  absl::StatusOr<std::unique_ptr<GroupGeneration>> scoped =
      GroupGeneration::Join(store, absl::StrCat("chorus/comm/", name), rank, size);
  if (!scoped.ok()) {
    return Annotate(scoped.status(), absl::StrCat("communicator '", name, "' rank ", rank));
  }
  PrefixStore mesh_store("mesh", **scoped);
  MeshOptions mesh_options;
  mesh_options.connect_timeout = settings.options.connect_timeout;
  absl::StatusOr<std::unique_ptr<Mesh>> mesh = device.CreateMesh(
      mesh_store, rank, size, mesh_options, Deadline::After(settings.options.connect_timeout));
  if (!mesh.ok()) {
    return Annotate(mesh.status(), absl::StrCat("communicator '", name, "' rank ", rank,
                                                ": creating the ", device.kind(), " mesh"));
  }
  CHORUS_RETURN_IF_ERROR((*scoped)->SetUp());
  std::shared_ptr<GroupGeneration> generation = *std::move(scoped);
  RankEnded rank_ended = [generation](int r) { return generation->HasEnded(r); };
  return Assemble(std::string(name), rank, size, std::move(generation), *std::move(mesh), device,
                  settings, std::move(rank_ended));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Assemble(
    std::string name, int rank, int size, std::shared_ptr<Store> store, std::shared_ptr<Mesh> mesh,
    Device& device, const CommunicatorSettings& settings, RankEnded rank_ended) {
  const CommunicatorOptions& options = settings.options;
  // Locality, learned once: the options', else the transport's, else one host.
  std::vector<int> labels = options.host_of_rank;
  if (labels.empty()) labels = mesh->HostOfRanks();
  const bool layout_known = !labels.empty();
  if (labels.empty()) labels.assign(size, 0);
  absl::StatusOr<Topology> topology = Topology::FromLabels(labels, size);
  if (!topology.ok()) {
    return Annotate(topology.status(), absl::StrCat("communicator '", name, "' rank ", rank, ": ",
                                                    options.host_of_rank.empty()
                                                        ? "the mesh's host layout"
                                                        : "CommunicatorOptions::host_of_rank"));
  }
  // The options' costs price the links between hosts; a device whose links within a host are
  // of another kind (shared memory beside TCP) prices those itself.
  const DeviceLinks links = device.Links();
  const CostParams local_cost = links.local == links.remote ? settings.cost : LinkCost(links.local);
  CommTuning tuning;
  tuning.segments = options.segment_bytes != 0
                        ? PipelineSegments{options.segment_bytes, options.segment_bytes}
                        : PipelineSegmentsFor(links.remote);
  tuning.pipeline_depth = options.pipeline_depth;
  tuning.streaming_bytes =
      options.streaming_bytes != 0 ? options.streaming_bytes : LastLevelCacheBytes();
  tuning.local_cost = local_cost;
  tuning.network_cost = settings.cost;
  tuning.cuda_ipc = options.cuda_ipc && layout_known && topology->hosts() == 1;
  tuning.cuda_ipc_min_bytes = options.cuda_ipc_min_bytes;
  tuning.staging_segment_bytes = options.cuda_staging_segment_bytes;
  tuning.piggyback_bytes = PiggybackBytesFor(links);
  tuning.eager_sends = EagerSendsFor(links);
  std::unique_ptr<TraceLog> trace;
  if (std::optional<std::string> path = GetEnv("CHORUS_TRACE_FILE")) {
    trace = std::make_unique<TraceLog>(*path, rank, name);
  }
  const std::string layout = topology->Describe();
  SharedSlots* const shared_slots = options.shared_slots ? mesh->ClaimSharedSlots() : nullptr;
  // Ranks on one host (so on its links alone) that copy their transfers themselves and outnumber
  // its cores.
  const bool cores_shared =
      topology->hosts() == 1 && links.local.copies_on_rank_cores && size > UsableCores();
  auto selector =
      std::make_unique<Selector>(settings.rules, settings.cost, tuning.segments, *topology,
                                 local_cost, shared_slots != nullptr, cores_shared);
  auto state =
      std::make_unique<CommState>(name, rank, size, std::move(store), std::move(mesh), tuning,
                                  *std::move(topology), std::move(trace), shared_slots);
  auto recorder = std::make_unique<FlightRecorder>(
      rank, name, static_cast<size_t>(options.flight_recorder_entries),
      GetEnv("CHORUS_FLIGHT_RECORDER_FILE").value_or(""));
  std::unique_ptr<SignalDumpRegistration> signal_dump;
  if (settings.dump_signal != 0 && options.flight_recorder_entries > 0) {
    CHORUS_ASSIGN_OR_RETURN(signal_dump,
                            SignalDumpRegistration::Create(*recorder, settings.dump_signal));
  }
  CHORUS_LOG(kInfo, "collectives")
      << "communicator " << name << ": rank " << rank << " of " << size << " over " << device.kind()
      << " (" << device.address() << "), " << layout << ", segments of "
      << tuning.segments.ring_bytes << " B (rings) and " << tuning.segments.tree_bytes
      << " B (trees), reduction kernels " << ReduceKernelSet()
      << (cores_shared ? ", more ranks than cores (trees priced as taking turns)" : "");
  return std::unique_ptr<Communicator>(new Communicator(std::move(state), std::move(selector),
                                                        std::move(recorder), std::move(signal_dump),
                                                        device, settings, std::move(rank_ended)));
}

Communicator::Communicator(std::unique_ptr<CommState> state, std::unique_ptr<Selector> selector,
                           std::unique_ptr<FlightRecorder> recorder,
                           std::unique_ptr<SignalDumpRegistration> signal_dump, Device& device,
                           const CommunicatorSettings& settings, RankEnded rank_ended)
    : state_(std::move(state)),
      id_(NewCommunicatorId()),
      selector_(std::move(selector)),
      recorder_(std::move(recorder)),
      signal_dump_(std::move(signal_dump)),
      timeout_(settings.options.timeout),
      device_(device),
      settings_(std::make_shared<const CommunicatorSettings>(settings)),
      rank_ended_(std::move(rank_ended)),
      pool_(std::make_unique<WorkerPool>(settings.options.worker_threads, state_->rank())) {}

// --- Sub-communicators ---

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Split(int color, int key) {
  ScopedLogRank log_rank(rank());
  const int64_t mine[2] = {color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(size()));
  CHORUS_RETURN_IF_ERROR(
      Annotate(AllGather(mine, all.data(), 2, DataType::kInt64),
               absl::StrCat("Split(color ", color, ", key ", key, ") of communicator ", name())));
  const int split = next_split_.fetch_add(1);
  if (color < 0) return std::unique_ptr<Communicator>();
  std::vector<std::pair<int64_t, int>> chosen;  // (key, rank here)
  for (int r = 0; r < size(); ++r) {
    if (all[2 * r] == color) chosen.emplace_back(all[2 * r + 1], r);
  }
  std::sort(chosen.begin(), chosen.end());
  std::vector<int> members;
  for (const auto& [unused_key, r] : chosen) members.push_back(r);
  return CreateChild(absl::StrCat("split", split, ".", color), std::move(members));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::CreateGroup(
    absl::Span<const int> ranks) {
  ScopedLogRank log_rank(rank());
  std::vector<int> members(ranks.begin(), ranks.end());
  std::vector<int> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.empty() || sorted.front() < 0 || sorted.back() >= size() ||
      std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() ||
      !std::binary_search(sorted.begin(), sorted.end(), rank())) {
    return InvalidArgumentError(absl::StrCat("CreateGroup on rank ", rank(), " of communicator ",
                                             name(), ": the group must list distinct ranks in [0, ",
                                             size(), ") including this one; got [",
                                             absl::StrJoin(members, ","), "]"));
  }
  int count;
  {
    std::lock_guard<std::mutex> lock(groups_mu_);
    count = group_counts_[members]++;
  }
  return CreateChild(absl::StrFormat("group%016x.%d", RanksDigest(members), count),
                     std::move(members));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::CreateChild(const std::string& suffix,
                                                                        std::vector<int> members) {
  // A broken communicator's mesh is aborted; Shrink is the way on from there.
  if (absl::Status broken = state_->broken(); !broken.ok()) {
    return Annotate(broken, absl::StrCat("creating sub-communicator ", suffix, " of ", name(),
                                         " (use Shrink to go on without failed ranks)"));
  }
  std::string child_name = absl::StrCat(name(), "/", suffix);
  // Parent and child share connections: their tags must differ (collectives/engine/tag.h).
  while (CommunicatorTagId(child_name) == state_->tag_id()) child_name += "'";
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<MeshView> view,
                          MeshView::Create(state_->shared_mesh(), members));
  const int child_rank = view->rank();
  auto store = std::make_shared<PrefixStore>(suffix, state_->shared_store());
  return AssembleFrom(std::move(child_name), child_rank, std::move(members), std::move(store),
                      std::move(view));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::AssembleFrom(
    std::string name, int rank, std::vector<int> ranks, std::shared_ptr<Store> store,
    std::shared_ptr<Mesh> mesh) const {
  CommunicatorSettings settings = *settings_;
  settings.options.host_of_rank.clear();
  for (int r : ranks) settings.options.host_of_rank.push_back(state_->topology().HostOf(r));
  const int size = static_cast<int>(ranks.size());
  RankEnded rank_ended = [parent = rank_ended_, ranks = std::move(ranks)](int r) {
    return parent(ranks[r]);
  };
  return Assemble(std::move(name), rank, size, std::move(store), std::move(mesh), device_, settings,
                  std::move(rank_ended));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Shrink(absl::Span<const int> excluded) {
  ScopedLogRank log_rank(rank());
  std::vector<int> gone(excluded.begin(), excluded.end());
  std::sort(gone.begin(), gone.end());
  const std::string what = absl::StrCat("Shrink of communicator ", name(), " on rank ", rank(),
                                        " without ranks [", absl::StrJoin(gone, ","), "]");
  if ((!gone.empty() && (gone.front() < 0 || gone.back() >= size())) ||
      std::adjacent_find(gone.begin(), gone.end()) != gone.end() ||
      std::binary_search(gone.begin(), gone.end(), rank())) {
    return InvalidArgumentError(
        absl::StrCat(what, ": the excluded ranks must be distinct ranks in [0, ", size(),
                     ") other than this "
                     "one"));
  }
  std::vector<int> survivors;
  for (int r = 0; r < size(); ++r) {
    if (!std::binary_search(gone.begin(), gone.end(), r)) survivors.push_back(r);
  }
  const int new_rank =
      static_cast<int>(std::find(survivors.begin(), survivors.end(), rank()) - survivors.begin());
  const int new_size = static_cast<int>(survivors.size());
  const std::string suffix = absl::StrCat("shrink", next_shrink_.fetch_add(1));
  auto shrink_store = std::make_shared<PrefixStore>(suffix, state_->shared_store());
  const Deadline deadline = Deadline::After(settings_->options.connect_timeout);

  // Every survivor must exclude the same ranks: each publishes its set and reads the others'.
  const std::string mine = absl::StrJoin(gone, ",");
  CHORUS_RETURN_IF_ERROR(Annotate(shrink_store->Set(ExcludedKey(rank()), mine), what));
  std::vector<std::string> keys;
  for (int r : survivors) keys.push_back(ExcludedKey(r));
  // Read in slices: between them, a survivor that has not come yet is checked for having gone,
  // so a rank that dies now fails the call at once instead of at the deadline.
  absl::StatusOr<std::vector<std::string>> sets;
  while (true) {
    sets = shrink_store->MultiGet(keys, deadline.Min(Deadline::After(kShrinkSlice)));
    if (sets.ok()) break;
    if (GetErrorKind(sets.status()) != ErrorKind::kDeadlineExceeded) {
      return Annotate(sets.status(), what);
    }
    std::vector<int> missing;
    for (int r : survivors) {
      absl::StatusOr<std::optional<std::string>> set = shrink_store->TryGet(ExcludedKey(r));
      if (set.ok() && !set->has_value()) missing.push_back(r);
    }
    for (int r : missing) {
      if (rank_ended_(r)) {
        return PeerUnavailableError(absl::StrCat(what, ": rank ", r,
                                                 " has gone (it left, or its process ended) "
                                                 "without calling Shrink; exclude it as well"),
                                    r);
      }
    }
    if (deadline.Expired()) {
      return DeadlineExceededError(
          absl::StrCat(what, ": ranks [", absl::StrJoin(missing, ","),
                       "] did not call Shrink within the connect timeout; if they failed too, "
                       "exclude them as well"),
          missing.empty() ? -1 : missing.front());
    }
  }
  for (size_t i = 0; i < survivors.size(); ++i) {
    if ((*sets)[i] != mine) {
      return MismatchError(absl::StrCat(what, ": rank ", survivors[i], " excludes [", (*sets)[i],
                                        "] instead; every survivor must exclude "
                                        "the same ranks"),
                           survivors[i]);
    }
  }

  PrefixStore mesh_store("mesh", *shrink_store);
  MeshOptions mesh_options;
  mesh_options.connect_timeout = settings_->options.connect_timeout;
  absl::StatusOr<std::unique_ptr<Mesh>> mesh =
      device_.CreateMesh(mesh_store, new_rank, new_size, mesh_options, deadline);
  if (!mesh.ok()) {
    return Annotate(mesh.status(),
                    absl::StrCat(what, ": creating the survivors' ", device_.kind(), " mesh"));
  }
  return AssembleFrom(absl::StrCat(name(), "/", suffix), new_rank, std::move(survivors),
                      std::move(shrink_store), *std::move(mesh));
}

PinnedPool& Communicator::Pinned(GpuRuntime& runtime) {
  std::call_once(pinned_once_, [&] {
    pinned_ = std::make_unique<PinnedPool>(runtime, settings_->options.pinned_cache_bytes);
  });
  return *pinned_;
}

}  // namespace chorus
