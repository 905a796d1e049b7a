// State shared by a communicator, the collectives it has in flight and its worker threads:
// identity, the mesh, the scoped store, tuning, and the communicator's fatal failure.
#ifndef CHORUS_COLLECTIVES_ENGINE_COMM_STATE_H_
#define CHORUS_COLLECTIVES_ENGINE_COMM_STATE_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "chorus/collectives/diagnostics/trace.h"
#include "chorus/collectives/engine/header_ring.h"
#include "chorus/collectives/engine/owed_headers.h"
#include "chorus/collectives/engine/slot_debts.h"
#include "chorus/collectives/engine/slot_turns.h"
#include "chorus/collectives/engine/topology.h"
#include "chorus/collectives/options.h"
#include "chorus/rendezvous/store.h"
#include "chorus/transport/transport.h"

namespace chorus {

// The largest first message to a peer that rides inside the header message where the device
// does not say (LinkProfile::piggyback_bytes), and the room for one that a collective's context
// holds without a heap buffer. 1 KiB: latency-bound messages (an 8-byte allreduce, a barrier, a
// small broadcast) fit, which halves their transport messages, while the two extra copies
// (into and out of the context's buffers) stay well under the ~1 us one message costs on
// shared memory.
inline constexpr size_t kPiggybackBytes = 1024;
// The most any device may ask for: header messages with room for more come from a cache that
// each thread keeps (engine/context.cc).
inline constexpr size_t kMostPiggybackBytes = size_t{16} << 10;

// How the pipelined algorithms cut an array, in bytes (0: not at all). A ring cuts each of its
// p blocks into segments of `ring_bytes`; a tree of more than two ranks (broadcast, reduce)
// moves the whole array through each of its levels, and cuts it into segments of `tree_bytes`.
// A tree of two ranks is one link, and takes `ring_bytes`.
struct PipelineSegments {
  size_t ring_bytes = 0;
  size_t tree_bytes = 0;

  // The segment of a tree over `ranks` ranks.
  size_t TreeBytes(int ranks) const { return ranks > 2 ? tree_bytes : ring_bytes; }
};

// CommunicatorOptions' pipelining and streaming, resolved: Communicator::Assemble fills every
// field from the options, the device's links and this machine's cache. The defaults below are
// what a CommState built by hand (tests) gets without a device or a cache to ask: no pipelining,
// the options' window, never streaming past the cache.
struct CommTuning {
  PipelineSegments segments;
  int pipeline_depth = CommunicatorOptions().pipeline_depth;
  size_t streaming_bytes = std::numeric_limits<size_t>::max();
  // Link costs (every field set) within a host and between hosts, with which the hierarchical
  // algorithm picks each phase's algorithm.
  CostParams local_cost;
  CostParams network_cost;
  // Collectives on CUDA device buffers that cuda_ipc implements use it unless the call names
  // another: the ranks certainly share one host (the transport or the options say so) and
  // CommunicatorOptions::cuda_ipc allows it.
  bool cuda_ipc = false;
  size_t cuda_ipc_min_bytes = 0;  // ... for calls of at least this many bytes
  // Staged allreduce, broadcast and reduce on device buffers run in segments of this many bytes
  // (staging/staged_pipeline.h); 0: whole.
  size_t staging_segment_bytes = 0;
  // The largest first message to a peer that rides inside the collective's header message
  // (engine/context.h); the same on every rank, since every rank's device has the same links.
  size_t piggyback_bytes = kPiggybackBytes;
  // Whether both kinds of the device's links complete a send of at most piggyback_bytes before
  // its receive is posted (LinkProfile::eager_sends): only then does a broadcast root run
  // ahead of its peers (owed_headers.h).
  bool eager_sends = false;
};

// CommTuning::piggyback_bytes for a device with `links`: the smaller of its two kinds of link's
// (messages within a host and between hosts share one limit, which both ends of every link
// must know), at most kMostPiggybackBytes.
size_t PiggybackBytesFor(const DeviceLinks& links);

// CommTuning::segments for a device whose links between hosts are `remote`, where the options
// leave them to the device: the link's segment for rings, its relay segment for trees.
PipelineSegments PipelineSegmentsFor(const LinkProfile& remote);

// CommTuning::eager_sends for a device with `links`: whether both of its kinds of link complete
// small sends before they are received (LinkProfile::eager_sends).
bool EagerSendsFor(const DeviceLinks& links);

// Thread-safe.
class CommState {
 public:
  // `store` and `mesh` may be shared with sub-communicators (Communicator::Split, ...).
  // `shared_slots`: the mesh's, claimed for this communicator (Mesh::ClaimSharedSlots), or null.
  CommState(std::string name, int rank, int size, std::shared_ptr<Store> store,
            std::shared_ptr<Mesh> mesh, CommTuning tuning, Topology topology,
            std::unique_ptr<TraceLog> trace, SharedSlots* shared_slots = nullptr);

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  uint16_t tag_id() const { return tag_id_; }
  Mesh& mesh() { return *mesh_; }
  // The mesh's shared slots when this communicator holds them; null otherwise.
  SharedSlots* shared_slots() const { return shared_slots_; }
  // The reads of those slots that its collectives owe (slot_debts.h).
  SlotDebts& slot_debts() { return slot_debts_; }
  // Header checks over messages left to later calls (owed_headers.h).
  OwedHeaders& owed_headers() { return owed_headers_; }
  // The order of this rank's calls on those slots (slot_turns.h).
  SlotTurns& slot_turns() { return slot_turns_; }
  const std::shared_ptr<Mesh>& shared_mesh() const { return mesh_; }
  // mesh().GetConnection(peer), remembered once it succeeds (the mesh returns the same object
  // for its whole life), so that a collective finds its peers without a transport's lock.
  absl::StatusOr<Connection*> GetConnection(int peer);
  Store& store() { return *store_; }
  const std::shared_ptr<Store>& shared_store() const { return store_; }
  const CommTuning& tuning() const { return tuning_; }
  // Which ranks share a host (fixed at creation).
  const Topology& topology() const { return topology_; }
  // Who sends its collective header to whom (header_ring.h).
  const HeaderRing& header_ring() const { return header_ring_; }
  // The timeline (CHORUS_TRACE_FILE); nullptr when tracing is off.
  TraceLog* trace() const { return trace_.get(); }

  // OK while the communicator is usable; afterwards the failure that broke it.
  absl::Status broken() const;

  // Marks the communicator broken by `error` (the first error wins), publishes it in the store
  // so that other ranks can report the cause instead of "connection closed", and aborts the
  // mesh so that every pending operation on every rank ends promptly. Idempotent.
  void Break(const absl::Status& error);

  // The failure some rank published with Break(), if any (kind preserved). Waits at most a
  // moment for a record whose writer has claimed it but not finished writing.
  std::optional<absl::Status> PublishedFailure();

  // The published failure if its record is complete now; one store read, never waits. For
  // collectives that have waited a while: a peer that broke the communicator before this rank
  // ever connected to it is otherwise only noticed at the connect timeout.
  std::optional<absl::Status> PeekFailure();

  // Scratch buffers for collectives, recycled so that repeated collectives neither allocate
  // nor fault pages in on the hot path. The contents of an acquired buffer are undefined.
  std::unique_ptr<uint8_t[]> AcquireScratch(size_t bytes, size_t* capacity);
  void ReleaseScratch(std::unique_ptr<uint8_t[]> buffer, size_t capacity);

 private:
  const std::string name_;
  const int rank_;
  const int size_;
  const uint16_t tag_id_;
  const std::shared_ptr<Store> store_;
  const std::shared_ptr<Mesh> mesh_;
  const CommTuning tuning_;
  const Topology topology_;
  const HeaderRing header_ring_;
  const std::unique_ptr<TraceLog> trace_;
  SharedSlots* const shared_slots_;  // owned by mesh_
  SlotDebts slot_debts_;
  OwedHeaders owed_headers_;
  SlotTurns slot_turns_;
  const std::unique_ptr<std::atomic<Connection*>[]> connections_;  // by rank; null: not yet
  mutable std::mutex mu_;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  // Set (under mu_) once broken_ is, so that broken() takes no lock while all is well.
  std::atomic<bool> is_broken_{false};
  std::multimap<size_t, std::unique_ptr<uint8_t[]>> scratch_ ABSL_GUARDED_BY(mu_);  // by size
  size_t scratch_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_ENGINE_COMM_STATE_H_
