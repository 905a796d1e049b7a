// A communicator: `size` ranks that run collectives together over one transport device.
//
//   auto comm = Communicator::Create(store, "job42/world", device, rank, size);
//   CHORUS_RETURN_IF_ERROR((*comm)->AllReduce(in, out, n, DataType::kFloat32, ReduceOp::kSum));
//   WorkPtr work = (*comm)->AllGatherAsync(in, out, n, DataType::kInt32);
//   CHORUS_RETURN_IF_ERROR(work->Wait());
//
// Every collective has a blocking form, run on the calling thread, and an asynchronous form
// that returns a Work handle and runs on the communicator's worker threads (options.h). Every
// rank must issue the same collectives in the same order (each gets the next sequence number);
// a rank that disagrees makes the collective fail on every rank with a MismatchError naming
// both views (engine/context.h), and breaks the communicator. Any failure other than a timeout, an
// invalid argument or Work::Abort breaks the communicator too, so that no rank is left waiting:
// later calls fail at once with the original error; create a new communicator to go on.
//
// Buffers (counts in elements; "block" = one rank's share; in-place forms in brackets):
//   AllReduce      send[count] -> recv[count] on every rank                 [send == recv]
//   Broadcast      root's send[count] -> recv[count] on every rank      [root: send == recv]
//   Reduce         send[count] -> root's recv[count]                    [root: send == recv]
//   AllGather      send[count] -> recv[size * count], rank r's block at r * count
//                                                           [send == recv + rank * count]
//   AllGatherV     send[counts[rank]] -> recv[sum(counts)], blocks packed in rank order
//                                                  [send == recv + sum(counts[0..rank))]
//   ReduceScatter  send[size * count] -> recv[count], the reduced block `rank`
//                                                           [recv == send + rank * count]
//   ReduceScatterV send[sum(counts)] -> recv[counts[rank]]
//                                                  [recv == send + sum(counts[0..rank))]
//   Gather         send[count] -> root's recv[size * count]   [root: send == recv + root*count]
//   GatherV        send[send_count] -> root's recv at displs[r], counts[r] (root only)
//                                                        [root: send == recv + displs[root]]
//   Scatter        root's send[size * count] -> recv[count]   [root: recv == send + root*count]
//   ScatterV       root's send at displs[r], counts[r] (root only) -> recv[recv_count]
//                                                        [root: recv == send + displs[root]]
//   AllToAll       send[size * count] -> recv[size * count]; block r of send goes to rank r,
//                  block r of recv comes from rank r                        [send == recv]
//   AllToAllV      send at send_displs[r], send_counts[r] to rank r; recv at recv_displs[r],
//                  recv_counts[r] from rank r                                [send == recv]
// (shape.h holds these layouts as data.) Zero counts are legal everywhere. Buffers that
// overlap other than in these in-place forms are rejected. Buffers not used on a rank (recv of
// Reduce off the root, ...) may be null.
//
// ReduceOp::kAvg sums, then divides by size() (integers truncate toward zero); the sum must
// be representable in the element type.
//
// Thread-safety: all methods may be called from any thread, but collectives must be issued in
// the same order on every rank, so calls from several threads must be ordered by the caller.
#ifndef CHORUS_COLLECTIVES_COMMUNICATOR_H_
#define CHORUS_COLLECTIVES_COMMUNICATOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "chorus/collectives/collective_args.h"
#include "chorus/collectives/collective_kind.h"
#include "chorus/collectives/engine/slot_turns.h"
#include "chorus/collectives/options.h"
#include "chorus/collectives/repeated_call.h"
#include "chorus/collectives/work.h"
#include "chorus/core/types.h"
#include "chorus/cuda/gpu_runtime.h"
#include "chorus/cuda/pinned_pool.h"
#include "chorus/rendezvous/store.h"
#include "chorus/transport/transport.h"

namespace chorus {

class CommState;
class FlightRecord;
class FlightRecorder;
class Selector;
class SignalDumpRegistration;
class WorkerPool;
struct AlgorithmEntry;
struct CollectiveHeader;
struct CommunicatorSettings;

class Communicator {
 public:
  // Creates rank `rank` of a communicator of `size` ranks. `name` scopes its keys in `store`
  // (many communicators may share a store) and must be the same on every rank and unique among
  // live communicators. `store` and `device` must outlive the communicator. Fails with
  // InvalidArgument for bad arguments or malformed CHORUS_* variables, and with the store's or
  // device's error if the mesh cannot be set up before options.connect_timeout.
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(
      Store& store, absl::string_view name, Device& device, int rank, int size,
      const CommunicatorOptions& options = {});

  // --- Sub-communicators ---
  // A sub-communicator runs every collective and algorithm, in parallel with its parent and
  // its siblings. It shares its parent's transport resources and keeps them alive: destroy the
  // two in any order. Its name is the parent's plus a suffix ("world/split0.1"); its keys live
  // in the parent's.

  // Collective over this communicator (every rank calls it, in the same order as its other
  // collectives, like MPI_Comm_split and ncclCommSplit): returns the communicator of the ranks
  // that passed the same `color`, ranked by `key`, ties by their rank here; null (and OK) for a
  // rank that passed a negative color. Costs one allgather of 16 bytes per rank here; runs over
  // this communicator's connections (MeshView: no new connection, socket or store traffic).
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key);
  static constexpr int kNoColor = -1;

  // Collective over the ranks of `ranks` only, each passing the same list (torch's new_group,
  // Horovod's process sets, MPI_Comm_create_group): the communicator of those ranks, its rank i
  // being rank ranks[i] here. Costs nothing but local work, over this communicator's
  // connections. Members that pass different lists get different communicators, whose first
  // collective fails at its deadline naming the ranks it waited for.
  absl::StatusOr<std::unique_ptr<Communicator>> CreateGroup(absl::Span<const int> ranks);

  // After ranks failed (ncclCommShrink, in the spirit of ULFM): every rank not in `excluded`
  // calls it with the same set, also on a broken communicator, and gets a communicator of the
  // survivors in rank order, over a new mesh of the same device. Nothing waits on an excluded
  // rank: the survivors compare their sets through the store (one write and one batched read
  // each, repeated every 50 ms while one is missing) and run the transport's bootstrap among
  // themselves. Errors: kInvalidArgument (this rank excluded, bad ranks); kMismatch naming a
  // survivor that excludes other ranks; kPeerUnavailable at once naming a survivor that has
  // gone instead (it destroyed its communicator, or its process on this host ended);
  // kDeadlineExceeded naming survivors that never came, after the connect timeout.
  absl::StatusOr<std::unique_ptr<Communicator>> Shrink(absl::Span<const int> excluded);

  // Aborts the communicator if asynchronous work is still pending (that work fails with
  // kAborted), then waits for the worker threads.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  const std::string& name() const;

  // Ends all pending and future operations of this communicator on this rank with kAborted,
  // and (through the closed connections and the store) makes the other ranks' pending
  // operations fail promptly too. Returns promptly.
  void Abort(absl::string_view reason);

  // The flight recorder of this rank: its last collectives (CommunicatorOptions::
  // flight_recorder_entries), one line each, oldest first, with per-peer progress of any that
  // is unfinished (diagnostics/flight_recorder.h). Callable from any thread, also while a
  // collective hangs.
  std::string FlightRecorderDump() const;

  // Writes the timeline so far to CHORUS_TRACE_FILE (the destructor also does); OK and
  // nothing written when tracing is off.
  absl::Status FlushTrace() const;

  // The algorithms that implement `kind` for host buffers ("ring", ...; cuda_ipc, which needs
  // device buffers, is not listed), and the one a call of `bytes` (as PayloadBytes (shape.h)
  // counts them) would use without a per-call choice.
  static std::vector<std::string> Algorithms(CollectiveKind kind);
  absl::StatusOr<std::string> ChooseAlgorithm(CollectiveKind kind, size_t bytes) const;

  // --- Collectives (see the buffer table above) ---
  absl::Status AllReduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                         const CollectiveOptions& options = {});
  WorkPtr AllReduceAsync(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                         const CollectiveOptions& options = {});

  absl::Status Broadcast(const void* send, void* recv, size_t count, DataType type, int root,
                         const CollectiveOptions& options = {});
  WorkPtr BroadcastAsync(const void* send, void* recv, size_t count, DataType type, int root,
                         const CollectiveOptions& options = {});

  absl::Status Reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                      int root, const CollectiveOptions& options = {});
  WorkPtr ReduceAsync(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                      int root, const CollectiveOptions& options = {});

  absl::Status AllGather(const void* send, void* recv, size_t count, DataType type,
                         const CollectiveOptions& options = {});
  WorkPtr AllGatherAsync(const void* send, void* recv, size_t count, DataType type,
                         const CollectiveOptions& options = {});

  absl::Status AllGatherV(const void* send, void* recv, absl::Span<const size_t> counts,
                          DataType type, const CollectiveOptions& options = {});
  WorkPtr AllGatherVAsync(const void* send, void* recv, absl::Span<const size_t> counts,
                          DataType type, const CollectiveOptions& options = {});

  absl::Status ReduceScatter(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                             const CollectiveOptions& options = {});
  WorkPtr ReduceScatterAsync(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                             const CollectiveOptions& options = {});

  absl::Status ReduceScatterV(const void* send, void* recv, absl::Span<const size_t> counts,
                              DataType type, ReduceOp op, const CollectiveOptions& options = {});
  WorkPtr ReduceScatterVAsync(const void* send, void* recv, absl::Span<const size_t> counts,
                              DataType type, ReduceOp op, const CollectiveOptions& options = {});

  absl::Status Gather(const void* send, void* recv, size_t count, DataType type, int root,
                      const CollectiveOptions& options = {});
  WorkPtr GatherAsync(const void* send, void* recv, size_t count, DataType type, int root,
                      const CollectiveOptions& options = {});

  absl::Status GatherV(const void* send, size_t send_count, void* recv,
                       absl::Span<const size_t> counts, absl::Span<const size_t> displs,
                       DataType type, int root, const CollectiveOptions& options = {});
  WorkPtr GatherVAsync(const void* send, size_t send_count, void* recv,
                       absl::Span<const size_t> counts, absl::Span<const size_t> displs,
                       DataType type, int root, const CollectiveOptions& options = {});

  absl::Status Scatter(const void* send, void* recv, size_t count, DataType type, int root,
                       const CollectiveOptions& options = {});
  WorkPtr ScatterAsync(const void* send, void* recv, size_t count, DataType type, int root,
                       const CollectiveOptions& options = {});

  absl::Status ScatterV(const void* send, absl::Span<const size_t> counts,
                        absl::Span<const size_t> displs, void* recv, size_t recv_count,
                        DataType type, int root, const CollectiveOptions& options = {});
  WorkPtr ScatterVAsync(const void* send, absl::Span<const size_t> counts,
                        absl::Span<const size_t> displs, void* recv, size_t recv_count,
                        DataType type, int root, const CollectiveOptions& options = {});

  absl::Status AllToAll(const void* send, void* recv, size_t count, DataType type,
                        const CollectiveOptions& options = {});
  WorkPtr AllToAllAsync(const void* send, void* recv, size_t count, DataType type,
                        const CollectiveOptions& options = {});

  absl::Status AllToAllV(const void* send, absl::Span<const size_t> send_counts,
                         absl::Span<const size_t> send_displs, void* recv,
                         absl::Span<const size_t> recv_counts, absl::Span<const size_t> recv_displs,
                         DataType type, const CollectiveOptions& options = {});
  WorkPtr AllToAllVAsync(const void* send, absl::Span<const size_t> send_counts,
                         absl::Span<const size_t> send_displs, void* recv,
                         absl::Span<const size_t> recv_counts, absl::Span<const size_t> recv_displs,
                         DataType type, const CollectiveOptions& options = {});

  absl::Status Barrier(const CollectiveOptions& options = {});
  WorkPtr BarrierAsync(const CollectiveOptions& options = {});

  // --- Point-to-point: `count` elements with a caller-chosen tag < 2^31. Messages with the
  // same (peer, tag) arrive in order. A receive of a different length than `count` fails with
  // a MismatchError naming both lengths. Point-to-point calls take no sequence number and may
  // be interleaved freely with collectives. Asynchronous forms are posted at once (they never
  // wait for a worker thread); their deadline is enforced by Work::Wait.
  absl::Status Send(const void* data, size_t count, DataType type, int peer, uint32_t tag,
                    const CollectiveOptions& options = {});
  WorkPtr SendAsync(const void* data, size_t count, DataType type, int peer, uint32_t tag,
                    const CollectiveOptions& options = {});
  absl::Status Recv(void* data, size_t count, DataType type, int peer, uint32_t tag,
                    const CollectiveOptions& options = {});
  WorkPtr RecvAsync(void* data, size_t count, DataType type, int peer, uint32_t tag,
                    const CollectiveOptions& options = {});
  // Receives one message with `tag` from whichever of `peers` sends first; returns its rank
  // (Work::peer() for the asynchronous form).
  absl::StatusOr<int> RecvFromAny(void* data, size_t count, DataType type,
                                  absl::Span<const int> peers, uint32_t tag,
                                  const CollectiveOptions& options = {});
  WorkPtr RecvFromAnyAsync(void* data, size_t count, DataType type, absl::Span<const int> peers,
                           uint32_t tag, const CollectiveOptions& options = {});

 private:
  // Whether a rank has certainly gone (left, or its process ended), as the store can tell:
  // what lets Shrink fail at once instead of at its deadline when a survivor dies.
  using RankEnded = std::function<bool(int rank)>;

  Communicator(std::unique_ptr<CommState> state, std::unique_ptr<Selector> selector,
               std::unique_ptr<FlightRecorder> recorder,
               std::unique_ptr<SignalDumpRegistration> signal_dump, Device& device,
               const CommunicatorSettings& settings, RankEnded rank_ended);
  // Builds a communicator on a mesh that is set up (communicator_create.cc).
  static absl::StatusOr<std::unique_ptr<Communicator>> Assemble(
      std::string name, int rank, int size, std::shared_ptr<Store> store,
      std::shared_ptr<Mesh> mesh, Device& device, const CommunicatorSettings& settings,
      RankEnded rank_ended);
  // A sub-communicator of `members` (ranks here, in its rank order) over a view of this mesh,
  // named by `suffix` under this communicator.
  absl::StatusOr<std::unique_ptr<Communicator>> CreateChild(const std::string& suffix,
                                                            std::vector<int> members);
  // Assemble for a communicator made from this one, whose rank i is rank ranks[i] here: this
  // one's settings and device, with the host layout and RankEnded renumbered.
  absl::StatusOr<std::unique_ptr<Communicator>> AssembleFrom(std::string name, int rank,
                                                             std::vector<int> ranks,
                                                             std::shared_ptr<Store> store,
                                                             std::shared_ptr<Mesh> mesh) const;

  // The collective path: validate, choose, number, then run here or on a worker.
  // A call's algorithm and header (all but its sequence number): those of this thread's last
  // call on this communicator when that call had the same arguments (repeated_call.h), else
  // the arguments are checked, the buffers placed and the algorithm chosen.
  absl::StatusOr<RepeatedCall> Prepare(CollectiveArgs& args,
                                       const CollectiveOptions& options) const;
  absl::Status Run(CollectiveArgs args, const CollectiveOptions& options);
  WorkPtr Launch(CollectiveArgs args, const CollectiveOptions& options);
  // `record` is the collective's flight record (null when the recorder is off); `start` is
  // when it starts (read by the caller, which also stamps the record with it): the deadline
  // counts from it.
  // Device buffers (args.cuda_device) run through pinned host copies (staging/staged_call.h;
  // in segments for a large allreduce, broadcast or reduce, staging/staged_pipeline.h) unless
  // the algorithm is cuda_ipc.
  // `slot_turn`: the call's turn on the shared slots, when the algorithm runs on them.
  absl::Status Execute(const CollectiveArgs& args, const AlgorithmEntry& algorithm,
                       const CollectiveHeader& header, uint32_t slot_turn, absl::Duration timeout,
                       Work* work, FlightRecord* record, Deadline::Clock::time_point start);
  // Execute's way for a blocking call on the shared slots of host buffers between ranks: no
  // context unless the call needs one (engine/lazy_context.h).
  absl::Status ExecuteOnSlots(const CollectiveArgs& args, const CollectiveHeader& header,
                              uint32_t slot_turn, Deadline deadline, FlightRecord* record,
                              Deadline::Clock::time_point start);
  // Records the outcome (flight record, timeout dump, trace event); while `ctx` is alive.
  void Conclude(const CollectiveHeader& header, Deadline::Clock::time_point start,
                const absl::Status& status, FlightRecord* record);
  absl::Status Validate(const CollectiveArgs& args) const;
  // The algorithm the call names, else cuda_ipc for a large enough call on device buffers on
  // one host that cuda_ipc implements (CommTuning::cuda_ipc), else none (the selector chooses).
  absl::string_view NamedAlgorithm(const CollectiveArgs& args,
                                   const CollectiveOptions& options) const;
  // Where the buffers of a validated call live: device buffers set args.cuda_device and
  // args.cuda_stream.
  absl::Status Place(CollectiveArgs& args, const CollectiveOptions& options) const;
  // The pinned blocks that stage this communicator's device buffers, made on first use.
  PinnedPool& Pinned(GpuRuntime& runtime);
  // The next sequence number, with a turn on the shared slots when `algorithm` runs on them.
  SlotTurns::Numbers NextSequence(const AlgorithmEntry& algorithm);
  // The elements of each segment when a call on device buffers is staged in segments
  // (CommTuning::staging_segment_bytes); 0 when it is not.
  size_t StagingSegment(const CollectiveArgs& args, AlgorithmId algorithm) const;
  // The header of a collective (with the host layout's digest for hierarchical, and the
  // staging segment where there is one).
  CollectiveHeader MakeHeader(const CollectiveArgs& args, AlgorithmId algorithm,
                              uint32_t sequence) const;

  // The point-to-point path.
  WorkPtr PostPointToPoint(CollectiveKind kind, void* data, size_t count, DataType type,
                           absl::Span<const int> peers, uint32_t tag,
                           const CollectiveOptions& options);

  const std::unique_ptr<CommState> state_;
  // Unique in the process: names this communicator's calls kept by Prepare (repeated_call.h).
  const uint64_t id_;
  const std::unique_ptr<Selector> selector_;
  const std::unique_ptr<FlightRecorder> recorder_;
  const std::unique_ptr<SignalDumpRegistration> signal_dump_;  // after recorder_, which it names
  const absl::Duration timeout_;
  Device& device_;
  const std::shared_ptr<const CommunicatorSettings> settings_;
  const RankEnded rank_ended_;
  // Sub-communicators made so far, which name the next ones identically on every rank.
  std::atomic<int> next_split_{0};
  std::atomic<int> next_shrink_{0};
  std::mutex groups_mu_;
  std::map<std::vector<int>, int> group_counts_ ABSL_GUARDED_BY(groups_mu_);
  // Asynchronous collectives launched whose Work is not complete yet. Counted apart from the
  // pool, which still holds a task for a moment after completing its Work: destroying the
  // communicator right after Wait() must not abort the mesh under its peers.
  std::atomic<int> unfinished_async_{0};
  std::once_flag pinned_once_;
  std::unique_ptr<PinnedPool> pinned_;
  std::unique_ptr<WorkerPool> pool_;  // last: its threads use the members above
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_COMMUNICATOR_H_
