// A communicator: `size` ranks (usually processes) that run collectives together.
//
//   auto store = chorus::Store::Open("file:///shared/job42");
//   auto device = chorus::Device::Create();
//   auto comm = chorus::Communicator::Create(*store, "world", *device, rank, size);
//   chorus::Status s = comm->AllReduce(in, out, n, DataType::kFloat32, ReduceOp::kSum);
//
// Every collective has a blocking form, run on the calling thread, and an asynchronous form
// that returns a Work at once and runs on the communicator's worker threads. Every rank must
// issue the same collectives in the same order; a rank that disagrees makes the collective fail
// on every rank with kMismatch. Any failure other than kDeadlineExceeded, kInvalidArgument or
// Work::Abort breaks the communicator, so that no rank is left waiting: later calls fail at
// once with the original error; create a new communicator to go on.
//
// Buffers (counts in elements; "block" = one rank's share; in-place forms in brackets):
//   AllReduce      send[count] -> recv[count] on every rank                 [send == recv]
//   Broadcast      root's send[count] -> recv[count] on every rank      [root: send == recv]
//   Reduce         send[count] -> root's recv[count]                    [root: send == recv]
//   AllGather      send[count] -> recv[size * count], rank r's block at r * count
//                                                           [send == recv + rank * count]
//   AllGatherV     send[counts[rank]] -> recv[sum(counts)], blocks packed in rank order
//   ReduceScatter  send[size * count] -> recv[count], the reduced block `rank`
//   ReduceScatterV send[sum(counts)] -> recv[counts[rank]]
//   Gather         send[count] -> root's recv[size * count]
//   GatherV        send[send_count] -> root's recv at displs[r], counts[r] (root only)
//   Scatter        root's send[size * count] -> recv[count]
//   ScatterV       root's send at displs[r], counts[r] (root only) -> recv[recv_count]
//   AllToAll       send[size * count] -> recv[size * count]; block r of send goes to rank r
//   AllToAllV      send at send_displs[r], send_counts[r] to rank r; recv at recv_displs[r],
//                  recv_counts[r] from rank r
// Per-rank arrays have size() entries; "root only" arrays may be empty elsewhere. Zero counts
// are legal. Buffers that overlap other than in the in-place forms are rejected. Buffers a rank
// does not use (recv of Reduce off the root, ...) may be null.
//
// Thread-safety: all methods may be called from any thread, but collectives issued from
// several threads must be ordered by the caller. Move-only.
#ifndef CHORUS_COMMUNICATOR_H_
#define CHORUS_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "chorus/chorus_c.h"
#include "chorus/detail/c_call.h"
#include "chorus/device.h"
#include "chorus/status.h"
#include "chorus/store.h"
#include "chorus/types.h"
#include "chorus/work.h"

namespace chorus {
inline namespace v0 {

struct CommunicatorOptions {
  double timeout_seconds = 0;          // default deadline of each collective; 0: 30 s
  double connect_timeout_seconds = 0;  // creating the mesh and connecting; 0: 30 s
  int worker_threads = 0;              // threads for asynchronous collectives; 0: 2
  std::string algorithm_rules;         // CHORUS_ALGO grammar (docs/collectives.md)
};

// Per-call options; every rank must pass the same algorithm.
struct CallOptions {
  double timeout_seconds = 0;  // this call's deadline; 0: the communicator's
  std::string algorithm;       // "ring", "binomial", ...; empty: chosen by size and topology
  // Where every buffer of the call lives (docs/cuda.md); kAuto asks the CUDA runtime when the
  // library has CUDA support and a GPU is present.
  MemoryType memory = MemoryType::kAuto;
  // For device buffers: the cudaStream_t (cast to void*) that orders them; null: the legacy
  // default stream. The call starts after the work queued there; work queued there after the
  // call sees the result.
  void* cuda_stream = nullptr;
};

class Communicator {
 public:
  // Creates rank `rank` of `size`. `name` scopes its keys in `store`: the same on every rank,
  // unique among live communicators. `store` and `device` must outlive the communicator.
  static StatusOr<Communicator> Create(Store& store, const std::string& name, Device& device,
                                       int rank, int size, const CommunicatorOptions& options = {});

  // --- Communicators made from this one: sub-communicators over its connections (Split,
  // CreateGroup) and the survivors' after failures (Shrink); chorus_c.h details each. One may
  // outlive this one (it keeps the transport they share alive): destroy them in any order.
  // The Store and Device given to Create must outlive them all. A broken communicator cannot be
  // split or grouped (its error is returned): shrink it.

  // Collective over this communicator: the communicator of the ranks that passed the same
  // `color`, ranked by `key`, ties by their rank here. A rank that passes a negative color
  // (kNoColor) gets an empty Communicator (false, see below).
  StatusOr<Communicator> Split(int color, int key);
  static constexpr int kNoColor = CHORUS_NO_COLOR;
  // Called by the ranks of `ranks` only, each with the same list: the communicator of those
  // ranks, its rank i being rank ranks[i] here. No communication.
  StatusOr<Communicator> CreateGroup(const std::vector<int>& ranks);
  // After ranks failed: every rank not in `excluded` calls it with the same set, also on a
  // broken communicator, and gets the communicator of the survivors in their order here, over
  // new connections. Never waits on an excluded rank: kMismatch names a survivor that excludes
  // others, kPeerUnavailable one that has gone, kDeadlineExceeded one that never came.
  StatusOr<Communicator> Shrink(const std::vector<int>& excluded);

  // False for an empty Communicator (Split's on a rank with no color, or one moved from): its
  // rank() is -1, its size() 0, and every call on it fails with kInvalidArgument.
  explicit operator bool() const { return handle_ != nullptr; }

  int rank() const { return chorus_comm_rank(handle_.get()); }
  int size() const { return chorus_comm_size(handle_.get()); }

  // Fails all pending and future operations on this rank with kAborted and makes the other
  // ranks' pending operations fail promptly too.
  void Abort(const std::string& reason) { chorus_comm_abort(handle_.get(), reason.c_str()); }

  // The last collectives, one line each (docs/troubleshooting.md). Callable while one hangs.
  std::string FlightRecorderDump() const;

  // --- Collectives (see the buffer table above) ---
  Status AllReduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                   const CallOptions& options = {});
  Work AllReduceAsync(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                      const CallOptions& options = {});
  Status Broadcast(const void* send, void* recv, size_t count, DataType type, int root,
                   const CallOptions& options = {});
  Work BroadcastAsync(const void* send, void* recv, size_t count, DataType type, int root,
                      const CallOptions& options = {});
  Status Reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root,
                const CallOptions& options = {});
  Work ReduceAsync(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root,
                   const CallOptions& options = {});
  Status AllGather(const void* send, void* recv, size_t count, DataType type,
                   const CallOptions& options = {});
  Work AllGatherAsync(const void* send, void* recv, size_t count, DataType type,
                      const CallOptions& options = {});
  Status AllGatherV(const void* send, void* recv, const std::vector<size_t>& counts, DataType type,
                    const CallOptions& options = {});
  Work AllGatherVAsync(const void* send, void* recv, const std::vector<size_t>& counts,
                       DataType type, const CallOptions& options = {});
  Status ReduceScatter(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                       const CallOptions& options = {});
  Work ReduceScatterAsync(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                          const CallOptions& options = {});
  Status ReduceScatterV(const void* send, void* recv, const std::vector<size_t>& counts,
                        DataType type, ReduceOp op, const CallOptions& options = {});
  Work ReduceScatterVAsync(const void* send, void* recv, const std::vector<size_t>& counts,
                           DataType type, ReduceOp op, const CallOptions& options = {});
  Status Gather(const void* send, void* recv, size_t count, DataType type, int root,
                const CallOptions& options = {});
  Work GatherAsync(const void* send, void* recv, size_t count, DataType type, int root,
                   const CallOptions& options = {});
  Status GatherV(const void* send, size_t send_count, void* recv, const std::vector<size_t>& counts,
                 const std::vector<size_t>& displs, DataType type, int root,
                 const CallOptions& options = {});
  Work GatherVAsync(const void* send, size_t send_count, void* recv,
                    const std::vector<size_t>& counts, const std::vector<size_t>& displs,
                    DataType type, int root, const CallOptions& options = {});
  Status Scatter(const void* send, void* recv, size_t count, DataType type, int root,
                 const CallOptions& options = {});
  Work ScatterAsync(const void* send, void* recv, size_t count, DataType type, int root,
                    const CallOptions& options = {});
  Status ScatterV(const void* send, const std::vector<size_t>& counts,
                  const std::vector<size_t>& displs, void* recv, size_t recv_count, DataType type,
                  int root, const CallOptions& options = {});
  Work ScatterVAsync(const void* send, const std::vector<size_t>& counts,
                     const std::vector<size_t>& displs, void* recv, size_t recv_count,
                     DataType type, int root, const CallOptions& options = {});
  Status AllToAll(const void* send, void* recv, size_t count, DataType type,
                  const CallOptions& options = {});
  Work AllToAllAsync(const void* send, void* recv, size_t count, DataType type,
                     const CallOptions& options = {});
  Status AllToAllV(const void* send, const std::vector<size_t>& send_counts,
                   const std::vector<size_t>& send_displs, void* recv,
                   const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_displs,
                   DataType type, const CallOptions& options = {});
  Work AllToAllVAsync(const void* send, const std::vector<size_t>& send_counts,
                      const std::vector<size_t>& send_displs, void* recv,
                      const std::vector<size_t>& recv_counts,
                      const std::vector<size_t>& recv_displs, DataType type,
                      const CallOptions& options = {});
  Status Barrier(const CallOptions& options = {});
  Work BarrierAsync(const CallOptions& options = {});

  // --- Point-to-point: `count` elements with a tag < 2^31. Messages with the same (peer, tag)
  // arrive in order; a receive of a different length fails with kMismatch. They take no
  // sequence number and may be interleaved freely with collectives.
  Status Send(const void* data, size_t count, DataType type, int peer, uint32_t tag,
              const CallOptions& options = {});
  Work SendAsync(const void* data, size_t count, DataType type, int peer, uint32_t tag,
                 const CallOptions& options = {});
  Status Recv(void* data, size_t count, DataType type, int peer, uint32_t tag,
              const CallOptions& options = {});
  Work RecvAsync(void* data, size_t count, DataType type, int peer, uint32_t tag,
                 const CallOptions& options = {});
  // One message with `tag` from whichever of `peers` sends first; returns its rank
  // (Work::peer() for the asynchronous form).
  StatusOr<int> RecvFromAny(void* data, size_t count, DataType type, const std::vector<int>& peers,
                            uint32_t tag, const CallOptions& options = {});
  Work RecvFromAnyAsync(void* data, size_t count, DataType type, const std::vector<int>& peers,
                        uint32_t tag, const CallOptions& options = {});

  // The C handle, for mixing with the C API; owned by this Communicator.
  chorus_comm_t* c_handle() const { return handle_.get(); }

 private:
  explicit Communicator(chorus_comm_t* handle) : handle_(handle) {}

  // The communicator that `c_function(args..., &handle)` makes: Create's and the calls above.
  template <typename CFunction, typename... Args>
  static StatusOr<Communicator> Make(CFunction c_function, const Args&... args);

  // What every collective and point-to-point method does (detail/communicator_inl.h): check its
  // per-rank arrays, then call `c_function(handle, args..., &c_options)` (the asynchronous form
  // with `&work` last) with each argument in its C form (detail::ToC).
  template <typename CFunction, typename... Args>
  Status CallBlocking(CFunction c_function, const CallOptions& options, const Args&... args);
  template <typename CFunction, typename... Args>
  Work CallAsync(CFunction c_function, const CallOptions& options, const Args&... args);

  detail::Handle<chorus_comm_t, chorus_comm_destroy> handle_;
};

}  // namespace v0
}  // namespace chorus

#include "chorus/detail/communicator_inl.h"  // IWYU pragma: export

#endif  // CHORUS_COMMUNICATOR_H_
