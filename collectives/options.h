// Options for communicators and for single collective calls. Plain structs; every field has a
// documented default.
#ifndef CHORUS_COLLECTIVES_OPTIONS_H_
#define CHORUS_COLLECTIVES_OPTIONS_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace chorus {

// Where a call's buffers live.
enum class MemoryPlacement {
  kAuto,  // asked of the GPU runtime, when one is installed and finds a GPU; else host
  kHost,  // host memory: nothing is asked
  kCuda,  // CUDA device memory (an error in a build without CUDA support)
};

// Per-call options.
struct CollectiveOptions {
  // Forces an algorithm by name ("ring", "recursive_doubling", "rabenseifner", "binomial",
  // "double_binary_tree", "pairwise", "linear", "dissemination", "hierarchical"); empty: the
  // CHORUS_ALGO rules, then CommunicatorOptions::algorithm_rules, then the cost model. Naming an
  // algorithm that does not implement the collective is an InvalidArgument error. Every rank
  // must make the same choice (checked by the header).
  std::string algorithm;

  // How long the whole collective may take on this rank; unset: the communicator's default.
  std::optional<absl::Duration> timeout;

  // Where the buffers live, and for device buffers the cudaStream_t that orders them (null:
  // the legacy default stream): the collective starts after the work queued on that stream
  // and work queued there after the call sees the result (docs/cuda.md). Every buffer of a
  // call lives in the same place.
  MemoryPlacement memory = MemoryPlacement::kAuto;
  void* cuda_stream = nullptr;
};

// Link costs of the alpha-beta-gamma model: time = messages * alpha + bytes * beta +
// reduced bytes * gamma. Zero fields take the device's own figures for its links between hosts
// (Device::Links in transport/transport.h).
struct CostParams {
  double alpha_us = 0;           // per message
  double beta_ns_per_byte = 0;   // per byte on the wire
  double gamma_ns_per_byte = 0;  // per byte combined by a reduction
};

struct CommunicatorOptions {
  // Default deadline of each collective (per call overridable). CHORUS_COLL_TIMEOUT overrides
  // it.
  absl::Duration timeout = absl::Seconds(30);

  // How long creating the mesh and connecting to a peer may take.
  absl::Duration connect_timeout = absl::Seconds(30);

  // Threads that run asynchronous collectives (started on demand). CHORUS_COLL_THREADS
  // overrides it. Several collectives may be in flight with fewer threads: they run in call
  // order, which every rank shares.
  int worker_threads = 2;

  // Pipelining of ring and tree algorithms: segment size and segments in flight.
  // CHORUS_COLL_SEGMENT_BYTES and CHORUS_COLL_PIPELINE_DEPTH override them. 16 rather than a
  // few: a segment whose receive is not posted yet must be buffered and copied by the
  // transport; the cost is 16 segments of scratch for the ring's partials. 1 MiB rather than
  // 256 KiB: every segment costs a wake-up (docs/benchmarks.md, "Why the defaults are what they
  // are"). 0 (the default): the segments the device prefers for its links between hosts
  // (Device::Links: 2 MiB over shm, 1 MiB over TCP and 512 KiB in its trees of 3 ranks or
  // more); set, it is every pipeline's. A segment at least the message's size
  // (CHORUS_COLL_SEGMENT_BYTES=inf) turns pipelining off.
  size_t segment_bytes = 0;
  int pipeline_depth = 16;

  // A collective whose output is larger than this writes its final blocks past the cache
  // (non-temporal stores, where the transport hands data over): they would be evicted before
  // the caller reads them, and streaming saves reading every destination line first. 0 (the
  // default): the last-level cache's size. CHORUS_COLL_STREAMING_BYTES overrides it.
  size_t streaming_bytes = 0;

  // Pinned host memory kept for reuse between calls on CUDA device buffers, which are staged
  // through it (docs/cuda.md). CHORUS_CUDA_PINNED_CACHE_BYTES overrides it.
  size_t pinned_cache_bytes = size_t{1} << 30;

  // Allreduce, reduce-scatter, allgather and broadcast of CUDA device buffers between ranks that
  // the transport (or host_of_rank) places on one host read each other's buffers through CUDA
  // IPC (the cuda_ipc algorithm) unless the call names another algorithm. CHORUS_CUDA_IPC=0
  // turns it off.
  bool cuda_ipc = true;
  // ... for calls of at least this many bytes; smaller ones are staged, which costs less than
  // cuda_ipc's rounds of stream waits and messages (docs/cuda.md).
  // CHORUS_CUDA_IPC_MIN_BYTES overrides it.
  size_t cuda_ipc_min_bytes = size_t{1} << 20;
  // Allreduce, broadcast and reduce of CUDA device buffers that are staged through pinned memory
  // run in segments of this many bytes when larger, so that the copies between the device and
  // pinned memory overlap the transfers (docs/cuda.md); 0 stages each call whole. Every rank
  // must use the same value. CHORUS_CUDA_STAGING_SEGMENT_BYTES overrides it.
  size_t cuda_staging_segment_bytes = size_t{8} << 20;

  // Barrier, and allreduce and broadcast of at most 4 MiB, between ranks that share memory (the shm
  // transport, the hybrid one within one host, the in-process one) go through the mesh's shared
  // slots and buffers instead of messages, unless a rule or the call names another algorithm (the
  // shared_slots algorithm, docs/collectives.md). CHORUS_SHARED_SLOTS=0 turns it off.
  bool shared_slots = true;

  // Link costs for the selector; zero fields use the defaults for the device's kind.
  // CHORUS_COLL_COST ("alpha_us=25,beta_ns=1.3,gamma_ns=0.1") overrides the fields it names.
  CostParams cost;

  // Algorithm rules in the CHORUS_ALGO grammar (see select/selector.h). Rules from CHORUS_ALGO are
  // consulted first, then these, then the cost model.
  std::string algorithm_rules;

  // Which ranks share a host: one label per rank, equal labels = one host (any non-negative
  // numbers; they are renumbered in the order of each host's lowest rank). Every rank must pass
  // the same. Empty (the default): the transport's answer (Mesh::HostOfRanks; the hybrid
  // transport knows it), else all ranks on one host. The selector considers the hierarchical
  // algorithm only when this gives two hosts or more and some host holds two ranks or more;
  // tests use it to simulate hosts over any transport.
  std::vector<int> host_of_rank;

  // Collectives the flight recorder keeps (diagnostics/flight_recorder.h); 0 turns it off.
  // CHORUS_FLIGHT_RECORDER overrides it.
  int flight_recorder_entries = 64;
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_OPTIONS_H_
