// The transport interface: how bytes move between ranks. Algorithms speak only this interface;
// transports implement it: tcp/, shm/ and hybrid/ (shm within a host, TCP between hosts) pass
// the shared conformance suite in tests/transport/, as any new one must; inproc/ (rank threads
// of one process) serves the collectives' tests.
//
//   Device      one per transport kind per process (a listening socket, an RDMA device, ...);
//               shared by any number of meshes.
//   Mesh        one communicator's view of its peers over a device: rank, size, addresses
//               exchanged through the store, connections created lazily on first use.
//   Connection  to one peer: non-blocking tagged Send/Recv returning Requests.
#ifndef CHORUS_TRANSPORT_TRANSPORT_H_
#define CHORUS_TRANSPORT_TRANSPORT_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "chorus/core/deadline.h"
#include "chorus/rendezvous/store.h"
#include "chorus/transport/receive_claim.h"
#include "chorus/transport/request.h"
#include "chorus/transport/shared_slots.h"

namespace chorus {

// Where a buffer lives. Host memory is all the TCP transport handles; the CUDA IPC transport
// takes device pointers and the verbs transport registers either (through a registration
// cache), so buffers carry their memory type instead of transports guessing.
enum class MemoryType { kHost, kCuda };

// For kCuda, `stream` (a cudaStream_t, opaque here so this header needs no CUDA) orders the
// transfer against the caller's GPU work: a transport waits for the work queued on it before
// reading a send buffer, and makes work queued after the receive wait for the data (CUDA
// events), instead of synchronising the whole device. Null means the legacy default stream.
struct MemoryRef {
  void* data = nullptr;
  size_t size = 0;
  MemoryType type = MemoryType::kHost;
  int device = -1;  // CUDA device ordinal for kCuda
  void* stream = nullptr;
};

struct ConstMemoryRef {
  const void* data = nullptr;
  size_t size = 0;
  MemoryType type = MemoryType::kHost;
  int device = -1;
  void* stream = nullptr;
};

// Takes a received message's bytes as they arrive, so a consumer (a reduction, say) reads
// them straight from the transport's own memory instead of from a copy in a receive buffer.
// A transport calls Consume from whichever thread makes its progress, never for one message
// from two threads at once, and never after the request is done or cancelled; every call
// happens before the request is seen as done.
class RecvSink {
 public:
  // Every piece but a message's last starts and ends at a multiple of this many bytes from
  // the message's start (so a piece never splits an element).
  static constexpr size_t kAlignment = 64;

  virtual ~RecvSink() = default;
  // `bytes` bytes of the message, at `offset` from its start. Pieces never overlap; when the
  // request completes successfully they have covered the message exactly once. A request that
  // fails (a peer died mid-message) may have handed over some pieces first.
  virtual void Consume(size_t offset, const void* data, size_t bytes) = 0;
  // True when Consume only copies the pieces to where the receive's buffer would have them: a
  // transport that can write a message into the buffer itself, without a copy of its own,
  // gains nothing by handing it over.
  virtual bool CopiesOnly() const { return false; }
};

// A connection to one peer. Thread-safe: many threads may post at once.
class Connection {
 public:
  virtual ~Connection() = default;

  virtual int peer() const = 0;

  // Posts a send of `buffer`. The buffer must stay valid and unchanged until the request is
  // done. Zero-length messages are legal.
  virtual RequestPtr Send(Tag tag, ConstMemoryRef buffer) = 0;

  // Posts a receive of the next message from this peer with `tag` into `buffer`. A message
  // longer than buffer.size fails the request with kInvalidArgument and is discarded, never
  // written past the buffer; a shorter one completes with request->bytes() set.
  virtual RequestPtr Recv(Tag tag, MemoryRef buffer) = 0;

  // Like Recv, but the transport may hand the message to `sink` piece by piece instead of
  // writing it into `buffer`: either every byte goes to the sink or the whole message lands
  // in the buffer, the transport's choice per message. Transports that gain nothing by it
  // (the default) always use the buffer.
  virtual RequestPtr RecvWithSink(Tag tag, MemoryRef buffer, RecvSink* sink) {
    return Recv(tag, buffer);
  }

  // Convenience overloads for host memory.
  RequestPtr Send(Tag tag, const void* data, size_t size) {
    return Send(tag, ConstMemoryRef{data, size});
  }
  RequestPtr Recv(Tag tag, void* data, size_t capacity) {
    return Recv(tag, MemoryRef{data, capacity});
  }
};

// One communicator's view of its peers over one device. Thread-safe.
class Mesh {
 public:
  virtual ~Mesh() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // The connection to `peer` (!= rank()), created on first use; later calls return the same
  // object. Connecting happens in the background: requests posted before the connection is up
  // are queued, and fail with kPeerUnavailable naming the peer if it cannot be reached before
  // the mesh's connect timeout. The pointer lives as long as the mesh.
  virtual absl::StatusOr<Connection*> GetConnection(int peer) = 0;

  // Posts a receive that takes the first message with `tag` from any rank in `peers`; exactly
  // one message is consumed, and request->peer() names its sender once done.
  virtual RequestPtr RecvFromAny(absl::Span<const int> peers, Tag tag, MemoryRef buffer) = 0;

  // RecvFromAny as part `part` of a receive posted on several meshes that share `claim`
  // (receive_claim.h): the mesh takes a message for it only once `claim` is won for `part`, and
  // a part whose claim another owner won completes with kAborted without touching `buffer`
  // (when the mesh next tries to match it; the poster cancels it once the receive is settled).
  // Transports that cannot share a receive (the default) fail the request with kInvalidArgument.
  virtual RequestPtr RecvFromAnyPart(absl::Span<const int> peers, Tag tag, MemoryRef buffer,
                                     std::shared_ptr<ReceiveClaim> claim, int part);

  // Fails every pending and future request on this mesh with kAborted and closes its
  // connections. Returns promptly; safe to call from any thread, also while others wait.
  virtual void Abort(absl::string_view reason) = 0;

  // Which ranks share a host, when the transport knows: one host number per rank, equal numbers
  // for ranks on one host, identical on every rank. Empty (the default) when unknown. The
  // collectives layer reads it once, when a communicator is created.
  virtual std::vector<int> HostOfRanks() const { return {}; }

  // The mesh's shared slots (shared_slots.h) for the first caller, which keeps them for the
  // mesh's life; null for every later caller, and for meshes whose ranks do not all share
  // memory (the default). Every rank of a mesh gets the same answer when its communicators are
  // built alike.
  virtual SharedSlots* ClaimSharedSlots() { return nullptr; }
};

struct MeshOptions {
  // How long connecting to a peer may take before its requests fail.
  absl::Duration connect_timeout = absl::Seconds(30);
};

// What one kind of link costs and how it is best used: what the collectives' cost model and
// pipelining take from a device instead of knowing transports by name. The figures come from
// tests/collectives:cost_probe (docs/collectives.md, "Selection").
struct LinkProfile {
  double alpha_us = 0;           // the latency of one message
  double beta_ns_per_byte = 0;   // time per byte moved over the link
  double gamma_ns_per_byte = 0;  // time per byte to reduce what arrives over it
  size_t segment_bytes = 0;      // the pipelining segment that suits it
  // The largest message that costs less copied into another one (a collective's first message
  // to a peer rides in its header message) than sent on its own; 0: the collectives' default.
  size_t piggyback_bytes = 0;
  // Whether a send of at most piggyback_bytes completes before its receive is posted (the
  // transport keeps it aside at the receiver), so that a rank may run calls ahead of a peer.
  bool eager_sends = false;
  // The pipelining segment where each rank passes on what it receives over one of these links
  // to the next (a chain of links, as in a tree's levels); 0: segment_bytes.
  size_t relay_segment_bytes = 0;
  // Whether what crosses the link is copied by the two ranks' own threads (shared memory), not
  // by a NIC or a copy engine: then transfers that run at once on a host whose ranks outnumber
  // its cores take turns on those cores instead of overlapping.
  bool copies_on_rank_cores = false;
  bool operator==(const LinkProfile& other) const {
    return alpha_us == other.alpha_us && beta_ns_per_byte == other.beta_ns_per_byte &&
           gamma_ns_per_byte == other.gamma_ns_per_byte && segment_bytes == other.segment_bytes &&
           piggyback_bytes == other.piggyback_bytes && eager_sends == other.eager_sends &&
           relay_segment_bytes == other.relay_segment_bytes &&
           copies_on_rank_cores == other.copies_on_rank_cores;
  }
};

// A device's links to ranks on other hosts and on this host; the same profile twice for a device
// with one kind of link.
struct DeviceLinks {
  LinkProfile remote;
  LinkProfile local;
};

// A transport instance. Thread-safe.
class Device {
 public:
  virtual ~Device() = default;

  // "tcp", "shm", "ibverbs", "cuda_ipc".
  virtual absl::string_view kind() const = 0;

  // This device's address as other processes reach it (for logs and the bootstrap).
  virtual std::string address() const = 0;

  // What its links cost (the collectives' defaults; CommunicatorOptions can override them).
  virtual DeviceLinks Links() const = 0;

  // Creates the mesh of ranks [0, size) in which this process is `rank`: publishes this
  // device's address through `store` (which the caller has already scoped to one communicator,
  // for example with a PrefixStore), learns the job identifier and every peer's address
  // through it, and returns without connecting (connections are made on first use).
  virtual absl::StatusOr<std::unique_ptr<Mesh>> CreateMesh(Store& store, int rank, int size,
                                                           const MeshOptions& options,
                                                           Deadline deadline) = 0;
};

}  // namespace chorus

#endif  // CHORUS_TRANSPORT_TRANSPORT_H_
