#include "chorus/collectives/communicator.h"

#include <cstring>
#include <memory>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chorus/collectives/algorithms/algorithms.h"
#include "chorus/collectives/diagnostics/flight_recorder.h"
#include "chorus/collectives/diagnostics/flight_recorder_signal.h"
#include "chorus/collectives/diagnostics/trace.h"
#include "chorus/collectives/engine/comm_state.h"
#include "chorus/collectives/engine/context.h"
#include "chorus/collectives/engine/header.h"
#include "chorus/collectives/engine/tag.h"
#include "chorus/collectives/engine/worker_pool.h"
#include "chorus/collectives/reduce/reduce_kernels.h"
#include "chorus/collectives/reduce/streaming_sink.h"
#include "chorus/collectives/repeated_call.h"
#include "chorus/collectives/select/algorithm_table.h"
#include "chorus/collectives/select/selector.h"
#include "chorus/collectives/shape.h"
#include "chorus/collectives/staging/staged_call.h"
#include "chorus/collectives/staging/staged_pipeline.h"
#include "chorus/core/deadline.h"
#include "chorus/core/env.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"

namespace chorus {
namespace {

std::vector<size_t> ToVector(absl::Span<const size_t> span) {
  return std::vector<size_t>(span.begin(), span.end());
}

absl::Status CheckBuffer(const void* data, size_t bytes, absl::string_view what) {
  if (data == nullptr && bytes > 0) {
    return InvalidArgumentError(absl::StrCat(what, " is null but holds ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

// Two buffers may be the same in the collective's in-place form (`in_place_at` bytes into
// the larger one) or disjoint; nothing else.
absl::Status CheckOverlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes,
                          bool in_place) {
  if (in_place || a == nullptr || b == nullptr || a_bytes == 0 || b_bytes == 0) {
    return absl::OkStatus();
  }
  const auto* x = static_cast<const uint8_t*>(a);
  const auto* y = static_cast<const uint8_t*>(b);
  if (x < y + b_bytes && y < x + a_bytes) {
    return InvalidArgumentError(
        "the send and receive buffers overlap, but not in the collective's in-place form "
        "(see communicator.h)");
  }
  return absl::OkStatus();
}

// kAvg: the algorithms summed; divide this rank's share of the result once.
void FinishAverage(const CollectiveArgs& args, int rank, int size) {
  if (!IsReduction(args.kind) || args.op != ReduceOp::kAvg) return;
  const size_t result = ElementsOf(args, rank, size).recv;
  if (result > 0) DivideBuffer(args.type, args.recv, result, size);
}

CollectiveArgs MakeArgs(CollectiveKind kind, const void* send, void* recv, size_t count,
                        DataType type) {
  CollectiveArgs args;
  args.kind = kind;
  args.send = send;
  args.recv = recv;
  args.count = count;
  args.type = type;
  return args;
}

}  // namespace

Communicator::~Communicator() {
  if (unfinished_async_.load() > 0) {
    Abort("the communicator was destroyed with operations pending");
  }
  pool_.reset();
  const absl::Status flushed = FlushTrace();
  if (!flushed.ok()) {
    ScopedLogRank log_rank(rank());
    CHORUS_LOG(kWarn, "collectives") << flushed.message();
  }
}

std::string Communicator::FlightRecorderDump() const { return recorder_->Dump(); }

absl::Status Communicator::FlushTrace() const {
  return state_->trace() != nullptr ? state_->trace()->Flush() : absl::OkStatus();
}

int Communicator::rank() const { return state_->rank(); }
int Communicator::size() const { return state_->size(); }
const std::string& Communicator::name() const { return state_->name(); }

void Communicator::Abort(absl::string_view reason) {
  ScopedLogRank log_rank(rank());
  state_->Break(AbortedError(
      absl::StrCat("communicator ", name(), " aborted on rank ", rank(), ": ", reason)));
}

std::vector<std::string> Communicator::Algorithms(CollectiveKind kind) {
  std::vector<std::string> names;
  for (AlgorithmId id : AlgorithmsFor(kind)) {
    // Not a choice on every communicator: cuda_ipc needs device buffers (docs/cuda.md),
    // shared_slots ranks that share memory.
    if (id != AlgorithmId::kCudaIpc && id != AlgorithmId::kSharedSlots) {
      names.emplace_back(AlgorithmName(id));
    }
  }
  return names;
}

absl::StatusOr<std::string> Communicator::ChooseAlgorithm(CollectiveKind kind, size_t bytes) const {
  CHORUS_ASSIGN_OR_RETURN(const AlgorithmEntry* entry,
                          selector_->Choose(ArgsForArray(kind, bytes, size()), size(), ""));
  return std::string(AlgorithmName(entry->id));
}

absl::Status Communicator::Validate(const CollectiveArgs& args) const {
  const int p = size();
  const int r = rank();
  const size_t elem = args.elem();
  const CollectiveShape& shape = ShapeOf(args.kind);
  if (shape.rooted && (args.root < 0 || args.root >= p)) {
    return InvalidArgumentError(
        absl::StrCat(shape.name, ": root ", args.root, " is not a rank of a communicator of ", p));
  }
  if (!shape.collective) {
    return InvalidArgumentError(absl::StrCat(shape.name, " is not a collective"));
  }
  CHORUS_RETURN_IF_ERROR(CheckShape(args, r, p));
  if (args.count > (size_t{1} << 56) / elem) {
    return InvalidArgumentError(absl::StrCat(shape.name, ": count ", args.count, " is too large"));
  }
  const BufferElements elements = ElementsOf(args, r, p);
  CHORUS_RETURN_IF_ERROR(CheckBuffer(args.send, elements.send * elem, "the send buffer"));
  CHORUS_RETURN_IF_ERROR(CheckBuffer(args.recv, elements.recv * elem, "the receive buffer"));
  return CheckOverlap(args.send, elements.send * elem, args.recv, elements.recv * elem,
                      IsInPlace(args, r));
}

absl::Status Communicator::Execute(const CollectiveArgs& args, const AlgorithmEntry& algorithm,
                                   const CollectiveHeader& header, uint32_t slot_turn,
                                   absl::Duration timeout, Work* work, FlightRecord* record,
                                   Deadline::Clock::time_point start) {
  // A call on the shared slots carries its header there and takes turns with this rank's other
  // calls on them.
  const bool on_slots = algorithm.id == AlgorithmId::kSharedSlots;
  // It ends its turn however it ends.
  absl::Cleanup end_turn = [&] {
    if (on_slots) state_->slot_turns().Done(slot_turn);
  };
  // A blocking collective runs on the caller's thread, which has no log rank of its own.
  ScopedLogRank log_rank(rank());
  const absl::Status broken = state_->broken();
  if (!broken.ok()) {
    const absl::Status status = MakeError(
        GetErrorKind(broken),
        absl::StrCat(header.Describe(), " on rank ", rank(), ": the communicator is broken (",
                     broken.message(), "); create a new communicator"),
        ErrorPeerRank(broken).value_or(-1));
    Conclude(header, start, status, record);
    return status;
  }
  const Deadline deadline = Deadline::AfterFrom(start, timeout);
  // A blocking call on the slots of host buffers between ranks stages nothing and makes its
  // context only if it needs one.
  if (on_slots && work == nullptr && args.cuda_device < 0 && size() > 1) {
    return ExecuteOnSlots(args, header, slot_turn, deadline, record, start);
  }
  // A copy between the device and pinned memory that fails leaves the peers waiting on this
  // rank: breaking the communicator tells them at once.
  auto staging_error = [&](const absl::Status& error, absl::string_view step) {
    const absl::Status status = MakeError(
        GetErrorKind(error), absl::StrCat(header.Describe(), " on rank ", rank(), ": ", step,
                                          " the CUDA device buffers: ", error.message()));
    state_->Break(status);
    return status;
  };
  // A staging failure before the algorithm starts ends the call here.
  auto staging_failed = [&](const absl::Status& error, absl::string_view step) {
    const absl::Status status = staging_error(error, step);
    Conclude(header, start, status, record);
    return status;
  };
  // cuda_ipc reads device buffers where they are; every other algorithm (and a single rank)
  // runs on pinned host copies, made whole before the algorithm runs or segment by segment.
  const bool read_in_place = algorithm.id == AlgorithmId::kCudaIpc && size() > 1;
  const size_t segment = StagingSegment(args, algorithm.id);
  // On the heap: only calls on device buffers have them, and a small host call should not pay
  // for clearing their room on the stack.
  std::unique_ptr<StagedCall> staged;
  std::unique_ptr<StagedPipeline> pipeline;
  if (segment > 0) {
    GpuRuntime& runtime = *InstalledGpuRuntime();
    absl::StatusOr<StagedPipeline> prepared =
        StagedPipeline::Prepare(runtime, Pinned(runtime), args, rank(), size(), segment);
    if (!prepared.ok()) return staging_failed(prepared.status(), "pinning memory for");
    pipeline = std::make_unique<StagedPipeline>(std::move(*prepared));
  } else if (args.cuda_device >= 0 && !read_in_place) {
    GpuRuntime& runtime = *InstalledGpuRuntime();
    absl::StatusOr<StagedCall> in =
        StagedCall::StageIn(runtime, Pinned(runtime), args, rank(), size(), deadline);
    if (!in.ok()) return staging_failed(in.status(), "copying in");
    staged = std::make_unique<StagedCall>(std::move(*in));
  }
  const CollectiveArgs& run_args = staged     ? staged->host_args()
                                   : pipeline ? pipeline->host_args()
                                              : args;
  CollectiveContext ctx(*state_, run_args, header, deadline, start);
  ctx.set_slot_turn(slot_turn);
  absl::Status status;
  if (work != nullptr && !work->Attach([&ctx] { ctx.Cancel(); })) {
    status = AbortedError(absl::StrCat(ctx.Describe(), ": aborted before it started"));
    // The peers still count this rank among their slots' readers.
    if (on_slots && size() > 1) SharedSlotsSkipped(ctx, run_args);
  } else {
    CHORUS_LOG(kDebug, "collectives")
        << ctx.Describe() << ": " << PayloadBytes(args, size()) << " bytes, algorithm "
        << AlgorithmName(algorithm.id) << (staged ? ", staged from a CUDA device" : "")
        << (pipeline
                ? absl::StrCat(", staged from a CUDA device in segments of ", segment, " elements")
                : "");
    // A blocking call's record was added running; an asynchronous one's, queued.
    if (record != nullptr) {
      if (work == nullptr) {
        record->Track(&ctx);
      } else {
        record->Start(&ctx, start);
      }
    }
    // The shared slots carry the headers themselves, and settle what earlier calls on them
    // left to check (slot_debts.h); a call over messages settles it before it starts.
    if (!on_slots) {
      status = ctx.SettleSlotDebts(/*probe=*/true);
      if (status.ok()) ctx.Start(algorithm.feeder);
    }
    if (status.ok() && pipeline) {
      // Each segment's result is complete (averaged too) before it is copied back; its sends,
      // which may read the result, end before the average rewrites it. Then its scratch serves
      // the next segment.
      status = pipeline->Run(
          deadline,
          [&](const CollectiveArgs& part) {
            const size_t sends = ctx.SendsPosted();
            const CollectiveContext::ScratchMark scratch = ctx.MarkScratch();
            absl::Status ran = algorithm.run(ctx, part);
            if (ran.ok()) ran = ctx.WaitSendsSince(sends);
            if (!ran.ok()) return ran;
            FinishAverage(part, rank(), size());
            ctx.ReleaseScratchSince(scratch);
            return ran;
          },
          staging_error);
    } else if (status.ok()) {
      status =
          size() == 1 ? (CopyOwnBlock(run_args), absl::OkStatus()) : algorithm.run(ctx, run_args);
    }
    // Checks left to later calls whose peers have now published are made before a call over
    // messages reports success, so that a disagreement is reported by a later call. A call on
    // the slots settled them before it published, and its next call will again: one more look
    // here would cost a broadcast root running ahead a lock and a load of a line its peer may
    // be writing, each call.
    if (status.ok() && size() > 1 && !on_slots) {
      status = ctx.SettleSlotDebts();
    }
    if (status.ok()) status = ctx.Finish();
    if (status.ok() && !read_in_place && !pipeline) FinishAverage(run_args, rank(), size());
    if (status.ok() && staged) {
      const absl::Status out = staged->StageOut(deadline);
      if (!out.ok()) status = staging_error(out, "copying the result back to");
    }
    if (work != nullptr) work->Detach();
  }
  Conclude(header, start, status, record);
  return status;
}

absl::Status Communicator::ExecuteOnSlots(const CollectiveArgs& args,
                                          const CollectiveHeader& header, uint32_t slot_turn,
                                          Deadline deadline, FlightRecord* record,
                                          Deadline::Clock::time_point start) {
  // No Work can cancel it, and it posts nothing whose progress a dump could describe: its
  // record does not point at a context, which it makes only if it needs one.
  LazyContext ctx(*state_, args, header, deadline, slot_turn);
  CHORUS_LOG(kDebug, "collectives") << ctx.Describe() << ": " << PayloadBytes(args, size())
                                    << " bytes, algorithm " << AlgorithmName(header.algorithm);
  absl::Status status = SharedSlotsCall(ctx, args);
  if (status.ok()) FinishAverage(args, rank(), size());
  Conclude(header, start, status, record);
  return status;
}

absl::string_view Communicator::NamedAlgorithm(const CollectiveArgs& args,
                                               const CollectiveOptions& options) const {
  if (!options.algorithm.empty()) return options.algorithm;
  const bool ipc = args.cuda_device >= 0 && FindAlgorithm(args.kind, AlgorithmId::kCudaIpc) &&
                   CudaIpcAutomatic(args.kind) && size() > 1 && state_->tuning().cuda_ipc &&
                   PayloadBytes(args, size()) >= state_->tuning().cuda_ipc_min_bytes;
  return ipc ? AlgorithmName(AlgorithmId::kCudaIpc) : absl::string_view();
}

absl::Status Communicator::Place(CollectiveArgs& args, const CollectiveOptions& options) const {
  GpuRuntime* const runtime = InstalledGpuRuntime();
  if (!PlacementAsked(options, runtime)) return absl::OkStatus();
  const BufferElements elements = ElementsOf(args, rank(), size());
  CHORUS_ASSIGN_OR_RETURN(
      const BufferPlacement placement,
      PlaceBuffers(CollectiveKindName(args.kind),
                   {{args.send, elements.send * args.elem(), "the send buffer"},
                    {args.recv, elements.recv * args.elem(), "the receive buffer"}},
                   options, runtime));
  if (placement.on_device) {
    args.cuda_device = placement.device;
    args.cuda_stream = placement.stream;
  }
  return absl::OkStatus();
}

void Communicator::Conclude(const CollectiveHeader& header, Deadline::Clock::time_point start,
                            const absl::Status& status, FlightRecord* record) {
  if (record != nullptr) {
    record->Finish(status);
    // Once per collective: only its own runner concludes it.
    if (!status.ok() && GetErrorKind(status) == ErrorKind::kDeadlineExceeded) {
      recorder_->Report(absl::StrCat(header.Describe(), " on rank ", rank(), " timed out"));
    }
  }
  if (TraceLog* trace = state_->trace()) {
    trace->Add(std::string(CollectiveKindName(header.kind)), "collective", WallTimeOf(start),
               WallNow(),
               {{"sequence", absl::StrCat(header.sequence)},
                {"algorithm", std::string(AlgorithmName(header.algorithm))},
                {"collective", header.Describe()},
                {"status", status.ok() ? std::string("ok") : std::string(status.message())}});
  }
}

SlotTurns::Numbers Communicator::NextSequence(const AlgorithmEntry& algorithm) {
  SlotTurns& turns = state_->slot_turns();
  if (algorithm.id == AlgorithmId::kSharedSlots) return turns.TakeTurn();
  return {turns.NextSequence(), 0};
}

size_t Communicator::StagingSegment(const CollectiveArgs& args, AlgorithmId algorithm) const {
  // cuda_ipc reads the device buffers in place; the shared slots carry a call in one piece.
  if (args.cuda_device < 0 || size() == 1 || algorithm == AlgorithmId::kCudaIpc ||
      algorithm == AlgorithmId::kSharedSlots) {
    return 0;
  }
  return PipelineSegmentElements(args, state_->tuning().staging_segment_bytes);
}

CollectiveHeader Communicator::MakeHeader(const CollectiveArgs& args, AlgorithmId algorithm,
                                          uint32_t sequence) const {
  uint64_t layout = algorithm == AlgorithmId::kHierarchical ? state_->topology().Digest() : 0;
  // A rank that runs the call in segments exchanges segment-sized messages: its peers must too.
  if (const size_t segment = StagingSegment(args, algorithm); segment > 0) {
    layout ^= (segment * 0x9e3779b97f4a7c15ull) | 1;
  }
  return CollectiveHeader::For(args, algorithm, sequence, size(), layout);
}

absl::StatusOr<RepeatedCall> Communicator::Prepare(CollectiveArgs& args,
                                                   const CollectiveOptions& options) const {
  const bool repeatable =
      RepeatableCall(args, options, PlacementAsked(options, InstalledGpuRuntime()));
  if (repeatable) {
    if (const RepeatedCall* repeated = FindRepeatedCall(id_, args)) return *repeated;
  }
  CHORUS_RETURN_IF_ERROR(Validate(args));
  CHORUS_RETURN_IF_ERROR(Place(args, options));
  RepeatedCall call;
  CHORUS_ASSIGN_OR_RETURN(call.algorithm,
                          selector_->Choose(args, size(), NamedAlgorithm(args, options)));
  call.header = MakeHeader(args, call.algorithm->id, /*sequence=*/0);
  if (repeatable) KeepRepeatedCall(id_, args, call.algorithm, call.header);
  return call;
}

absl::Status Communicator::Run(CollectiveArgs args, const CollectiveOptions& options) {
  CHORUS_ASSIGN_OR_RETURN(RepeatedCall call, Prepare(args, options));
  const AlgorithmEntry& algorithm = *call.algorithm;
  const SlotTurns::Numbers numbers = NextSequence(algorithm);
  call.header.sequence = numbers.sequence;
  // One clock read for the deadline and the record. A call on the shared slots takes a quarter
  // of a microsecond, of which a precise reading at its end would be a tenth: its record notes
  // the end by the coarse clock instead (unless traced).
  const Deadline::Clock::time_point start = Deadline::Clock::now();
  const FlightClock clock = algorithm.id == AlgorithmId::kSharedSlots && state_->trace() == nullptr
                                ? FlightClock::kCoarse
                                : FlightClock::kPrecise;
  FlightRecord* const record = recorder_->Add(call.header, FlightState::kRunning, clock, start);
  return Execute(args, algorithm, call.header, numbers.turn, options.timeout.value_or(timeout_),
                 nullptr, record, start);
}

WorkPtr Communicator::Launch(CollectiveArgs args, const CollectiveOptions& options) {
  absl::StatusOr<RepeatedCall> prepared = Prepare(args, options);
  if (!prepared.ok()) {
    auto work =
        std::make_shared<Work>(args.kind, 0, "none", std::string(CollectiveKindName(args.kind)));
    work->Complete(prepared.status());
    return work;
  }
  const AlgorithmEntry* const algorithm = prepared->algorithm;
  const SlotTurns::Numbers numbers = NextSequence(*algorithm);
  CollectiveHeader header = prepared->header;
  header.sequence = numbers.sequence;
  auto work = std::make_shared<Work>(args.kind, numbers.sequence,
                                     std::string(AlgorithmName(algorithm->id)), header.Describe());
  const absl::Duration timeout = options.timeout.value_or(timeout_);
  FlightRecord* const record =
      recorder_->Add(header, FlightState::kQueued, FlightClock::kPrecise, Deadline::Clock::now());
  unfinished_async_.fetch_add(1);
  pool_->Submit([this, args = std::move(args), entry = algorithm, header, turn = numbers.turn,
                 timeout, work, record] {
    const absl::Status status =
        Execute(args, *entry, header, turn, timeout, work.get(), record, Deadline::Clock::now());
    unfinished_async_.fetch_sub(1);
    work->Complete(status);
  });
  return work;
}

WorkPtr Communicator::PostPointToPoint(CollectiveKind kind, void* data, size_t count, DataType type,
                                       absl::Span<const int> peers, uint32_t tag,
                                       const CollectiveOptions& options) {
  const size_t bytes = count * DataTypeSize(type);
  const std::string description =
      absl::StrCat(CollectiveKindName(kind), kind == CollectiveKind::kSend ? " to" : " from",
                   " rank", peers.size() == 1 ? " " : "s ", absl::StrJoin(peers, ","), " (tag ",
                   tag, ", ", count, " x ", DataTypeName(type), ") on rank ", rank());
  auto work = std::make_shared<Work>(kind, 0, "direct", description);
  absl::Status invalid = CheckBuffer(data, bytes, "the buffer");
  if (tag > kMaxUserTag) {
    invalid = InvalidArgumentError(absl::StrCat(description, ": tags must be below 2^31"));
  }
  if (peers.empty()) invalid = InvalidArgumentError(absl::StrCat(description, ": no peer"));
  for (int peer : peers) {
    if (peer < 0 || peer >= size() || peer == rank()) {
      invalid = InvalidArgumentError(
          absl::StrCat(description, ": rank ", peer, " is not another rank of ", size()));
    }
  }
  if (invalid.ok()) invalid = state_->broken();
  if (!invalid.ok()) {
    work->Complete(invalid);
    return work;
  }
  const Deadline deadline = Deadline::After(options.timeout.value_or(timeout_));
  absl::StatusOr<BufferPlacement> placement =
      PlaceBuffers(description, {{data, bytes, "the buffer"}}, options, InstalledGpuRuntime());
  // Device buffers travel through a pinned copy: a send's is filled before it is posted, a
  // receive's goes to the device when the work finishes.
  std::shared_ptr<StagedRegion> staged;
  if (placement.ok() && placement->on_device) {
    GpuRuntime& runtime = *InstalledGpuRuntime();
    const bool is_send = kind == CollectiveKind::kSend;
    absl::StatusOr<StagedRegion> region =
        StageRegion(runtime, Pinned(runtime), *placement, data, bytes, /*copy_in=*/is_send);
    absl::Status copied = region.status();
    if (copied.ok() && is_send) {
      copied = runtime.WaitStream(placement->device, placement->stream, deadline);
    }
    if (!copied.ok()) {
      placement = MakeError(
          GetErrorKind(copied),
          absl::StrCat(description, ": staging the CUDA device buffer: ", copied.message()));
    } else {
      staged = std::make_shared<StagedRegion>(std::move(*region));
      data = staged->host_data();
    }
  }
  if (!placement.ok()) {
    work->Complete(placement.status());
    return work;
  }
  const Tag wire_tag = PointToPointTag(state_->tag_id(), tag);
  RequestPtr request;
  if (peers.size() > 1) {
    request = state_->mesh().RecvFromAny(peers, wire_tag, MemoryRef{data, bytes});
  } else {
    absl::StatusOr<Connection*> connection = state_->GetConnection(peers[0]);
    if (!connection.ok()) {
      work->Complete(Annotate(connection.status(), description));
      return work;
    }
    request = kind == CollectiveKind::kSend
                  ? (*connection)->Send(wire_tag, ConstMemoryRef{data, bytes})
                  : (*connection)->Recv(wire_tag, MemoryRef{data, bytes});
  }
  work->BindRequest(
      std::move(request),
      [description, bytes, kind, staged, placement = *placement,
       deadline](const Request& done) -> absl::Status {
        const absl::Status status = done.status();
        if (!status.ok()) {
          if (GetErrorKind(status) == ErrorKind::kInvalidArgument) {
            return MismatchError(absl::StrCat(description, ": rank ", done.peer(),
                                              " sent a longer message (", status.message(), ")"),
                                 done.peer());
          }
          return MakeError(GetErrorKind(status), absl::StrCat(description, ": ", status.message()),
                           done.peer());
        }
        if (kind != CollectiveKind::kSend && done.bytes() != bytes) {
          return MismatchError(absl::StrCat(description, ": rank ", done.peer(), " sent ",
                                            done.bytes(), " bytes where ", bytes, " were expected"),
                               done.peer());
        }
        if (staged != nullptr && kind != CollectiveKind::kSend) {
          const absl::Status out =
              UnstageRegion(*InstalledGpuRuntime(), placement, *staged, 0, bytes, deadline);
          if (!out.ok()) {
            return MakeError(GetErrorKind(out),
                             absl::StrCat(description, ": copying the message to the CUDA ",
                                          "device buffer: ", out.message()));
          }
        }
        return absl::OkStatus();
      },
      deadline);
  return work;
}

// --- Thin public wrappers: build the arguments, then Run (blocking) or Launch (async). ---

#define CHORUS_BLOCKING_AND_ASYNC(Name, Params, Build) \
  absl::Status Communicator::Name Params {             \
    CollectiveArgs args = Build;                       \
    return Run(std::move(args), options);              \
  }                                                    \
  WorkPtr Communicator::Name##Async Params {           \
    CollectiveArgs args = Build;                       \
    return Launch(std::move(args), options);           \
  }

namespace {

CollectiveArgs Reduction(CollectiveKind kind, const void* send, void* recv, size_t count,
                         DataType type, ReduceOp op, int root) {
  CollectiveArgs args = MakeArgs(kind, send, recv, count, type);
  args.op = op;
  args.root = root;
  return args;
}

CollectiveArgs Rooted(CollectiveKind kind, const void* send, void* recv, size_t count,
                      DataType type, int root) {
  CollectiveArgs args = MakeArgs(kind, send, recv, count, type);
  args.root = root;
  return args;
}

CollectiveArgs WithCounts(CollectiveArgs args, absl::Span<const size_t> counts) {
  args.counts = ToVector(counts);
  return args;
}

}  // namespace

CHORUS_BLOCKING_AND_ASYNC(AllReduce,
                          (const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                           const CollectiveOptions& options),
                          Reduction(CollectiveKind::kAllReduce, send, recv, count, type, op, -1))

CHORUS_BLOCKING_AND_ASYNC(Broadcast,
                          (const void* send, void* recv, size_t count, DataType type, int root,
                           const CollectiveOptions& options),
                          Rooted(CollectiveKind::kBroadcast, send, recv, count, type, root))

CHORUS_BLOCKING_AND_ASYNC(Reduce,
                          (const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                           int root, const CollectiveOptions& options),
                          Reduction(CollectiveKind::kReduce, send, recv, count, type, op, root))

CHORUS_BLOCKING_AND_ASYNC(AllGather,
                          (const void* send, void* recv, size_t count, DataType type,
                           const CollectiveOptions& options),
                          MakeArgs(CollectiveKind::kAllGather, send, recv, count, type))

CHORUS_BLOCKING_AND_ASYNC(AllGatherV,
                          (const void* send, void* recv, absl::Span<const size_t> counts,
                           DataType type, const CollectiveOptions& options),
                          WithCounts(MakeArgs(CollectiveKind::kAllGatherV, send, recv, 0, type),
                                     counts))

CHORUS_BLOCKING_AND_ASYNC(ReduceScatter,
                          (const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                           const CollectiveOptions& options),
                          Reduction(CollectiveKind::kReduceScatter, send, recv, count, type, op,
                                    -1))

CHORUS_BLOCKING_AND_ASYNC(
    ReduceScatterV,
    (const void* send, void* recv, absl::Span<const size_t> counts, DataType type, ReduceOp op,
     const CollectiveOptions& options),
    WithCounts(Reduction(CollectiveKind::kReduceScatterV, send, recv, 0, type, op, -1), counts))

CHORUS_BLOCKING_AND_ASYNC(Gather,
                          (const void* send, void* recv, size_t count, DataType type, int root,
                           const CollectiveOptions& options),
                          Rooted(CollectiveKind::kGather, send, recv, count, type, root))

CHORUS_BLOCKING_AND_ASYNC(GatherV,
                          (const void* send, size_t send_count, void* recv,
                           absl::Span<const size_t> counts, absl::Span<const size_t> displs,
                           DataType type, int root, const CollectiveOptions& options),
                          [&] {
                            CollectiveArgs args = Rooted(CollectiveKind::kGatherV, send, recv,
                                                         send_count, type, root);
                            args.counts = ToVector(counts);
                            args.displs = ToVector(displs);
                            return args;
                          }())

CHORUS_BLOCKING_AND_ASYNC(Scatter,
                          (const void* send, void* recv, size_t count, DataType type, int root,
                           const CollectiveOptions& options),
                          Rooted(CollectiveKind::kScatter, send, recv, count, type, root))

CHORUS_BLOCKING_AND_ASYNC(ScatterV,
                          (const void* send, absl::Span<const size_t> counts,
                           absl::Span<const size_t> displs, void* recv, size_t recv_count,
                           DataType type, int root, const CollectiveOptions& options),
                          [&] {
                            CollectiveArgs args = Rooted(CollectiveKind::kScatterV, send, recv,
                                                         recv_count, type, root);
                            args.send_counts = ToVector(counts);
                            args.send_displs = ToVector(displs);
                            return args;
                          }())

CHORUS_BLOCKING_AND_ASYNC(AllToAll,
                          (const void* send, void* recv, size_t count, DataType type,
                           const CollectiveOptions& options),
                          MakeArgs(CollectiveKind::kAllToAll, send, recv, count, type))

CHORUS_BLOCKING_AND_ASYNC(
    AllToAllV,
    (const void* send, absl::Span<const size_t> send_counts, absl::Span<const size_t> send_displs,
     void* recv, absl::Span<const size_t> recv_counts, absl::Span<const size_t> recv_displs,
     DataType type, const CollectiveOptions& options),
    [&] {
      CollectiveArgs args = MakeArgs(CollectiveKind::kAllToAllV, send, recv, 0, type);
      args.send_counts = ToVector(send_counts);
      args.send_displs = ToVector(send_displs);
      args.counts = ToVector(recv_counts);
      args.displs = ToVector(recv_displs);
      return args;
    }())

CHORUS_BLOCKING_AND_ASYNC(Barrier, (const CollectiveOptions& options),
                          MakeArgs(CollectiveKind::kBarrier, nullptr, nullptr, 0, DataType::kUint8))

#undef CHORUS_BLOCKING_AND_ASYNC

absl::Status Communicator::Send(const void* data, size_t count, DataType type, int peer,
                                uint32_t tag, const CollectiveOptions& options) {
  return SendAsync(data, count, type, peer, tag, options)->Wait();
}

WorkPtr Communicator::SendAsync(const void* data, size_t count, DataType type, int peer,
                                uint32_t tag, const CollectiveOptions& options) {
  // The transport only reads a send buffer; the shared path takes a mutable pointer.
  return PostPointToPoint(CollectiveKind::kSend, const_cast<void*>(data), count, type, {&peer, 1},
                          tag, options);
}

absl::Status Communicator::Recv(void* data, size_t count, DataType type, int peer, uint32_t tag,
                                const CollectiveOptions& options) {
  return RecvAsync(data, count, type, peer, tag, options)->Wait();
}

WorkPtr Communicator::RecvAsync(void* data, size_t count, DataType type, int peer, uint32_t tag,
                                const CollectiveOptions& options) {
  return PostPointToPoint(CollectiveKind::kRecv, data, count, type, {&peer, 1}, tag, options);
}

absl::StatusOr<int> Communicator::RecvFromAny(void* data, size_t count, DataType type,
                                              absl::Span<const int> peers, uint32_t tag,
                                              const CollectiveOptions& options) {
  WorkPtr work = RecvFromAnyAsync(data, count, type, peers, tag, options);
  CHORUS_RETURN_IF_ERROR(work->Wait());
  return work->peer();
}

WorkPtr Communicator::RecvFromAnyAsync(void* data, size_t count, DataType type,
                                       absl::Span<const int> peers, uint32_t tag,
                                       const CollectiveOptions& options) {
  return PostPointToPoint(CollectiveKind::kRecv, data, count, type, peers, tag, options);
}

}  // namespace chorus
