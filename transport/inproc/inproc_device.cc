#include "chorus/transport/inproc/inproc_device.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "chorus/core/status.h"

namespace chorus {
namespace {

class Fabric;

// A send or receive posted on a fabric. Lives in the queue of the receiving rank's endpoint
// until matched or cancelled; that endpoint's mutex guards every access to its buffer.
class InprocRequest : public Request {
 public:
  InprocRequest(RequestKind kind, int peer, Tag tag, std::shared_ptr<Fabric> fabric, int owner)
      : Request(kind, peer, tag), fabric_(std::move(fabric)), owner_(owner) {}

  void Cancel() override;

  // The rank whose endpoint queues this request (the receiver's, for sends and receives).
  int owner() const { return owner_; }

  ConstMemoryRef send_buffer;
  MemoryRef recv_buffer;
  std::vector<int> sources;  // receives: the ranks it accepts (one, or several for RecvFromAny)
  int sender = -1;           // sends: the sending rank

 private:
  const std::shared_ptr<Fabric> fabric_;
  const int owner_;
};

using InprocRequestPtr = std::shared_ptr<InprocRequest>;

// The queues of one receiving rank. Matching and copying happen under `mu`, so once a
// request has been removed under it (cancelled or completed) its buffer is never touched again.
struct Endpoint {
  std::mutex mu;
  bool joined ABSL_GUARDED_BY(mu) = false;
  bool closed ABSL_GUARDED_BY(mu) = false;
  std::string close_reason ABSL_GUARDED_BY(mu);
  std::list<InprocRequestPtr> recvs ABSL_GUARDED_BY(mu);  // posted, oldest first
  std::list<InprocRequestPtr> sends ABSL_GUARDED_BY(mu);  // unmatched, oldest first
};

bool Accepts(const InprocRequest& recv, int sender, Tag tag) {
  return recv.tag() == tag &&
         std::find(recv.sources.begin(), recv.sources.end(), sender) != recv.sources.end();
}

// Copies a matched message and completes both requests. Caller holds the endpoint's mutex.
void Deliver(InprocRequest& send, InprocRequest& recv) {
  const size_t bytes = send.send_buffer.size;
  if (bytes > recv.recv_buffer.size) {
    recv.Complete(InvalidArgumentError(absl::StrCat(
                      "inproc: message of ", bytes, " bytes from rank ", send.sender, " (tag ",
                      absl::Hex(send.tag()), ") is longer than the posted buffer of ",
                      recv.recv_buffer.size, " bytes; it was discarded")),
                  0, send.sender);
  } else {
    if (bytes > 0) std::memcpy(recv.recv_buffer.data, send.send_buffer.data, bytes);
    recv.Complete(absl::OkStatus(), bytes, send.sender);
  }
  send.Complete(absl::OkStatus(), bytes);
}

// The meshes of one communicator in this process. Thread-safe.
class Fabric {
 public:
  Fabric(std::string id, int size) : id_(std::move(id)), endpoints_(size), closed_(size) {}

  const std::string& id() const { return id_; }
  int size() const { return static_cast<int>(endpoints_.size()); }

  absl::Status Join(int rank) {
    Endpoint& endpoint = endpoints_[rank];
    std::lock_guard<std::mutex> lock(endpoint.mu);
    if (endpoint.joined) {
      return InvalidArgumentError(absl::StrCat("inproc fabric ", id_, ": rank ", rank,
                                               " joined twice; every rank needs its own rank "
                                               "number"));
    }
    endpoint.joined = true;
    return absl::OkStatus();
  }

  void Post(const InprocRequestPtr& request) {
    Endpoint& endpoint = endpoints_[request->owner()];
    std::lock_guard<std::mutex> lock(endpoint.mu);
    if (request->kind() == RequestKind::kSend) {
      PostSend(endpoint, request);
    } else {
      PostRecv(endpoint, request);
    }
  }

  void Cancel(InprocRequest* request) {
    Endpoint& endpoint = endpoints_[request->owner()];
    std::lock_guard<std::mutex> lock(endpoint.mu);
    auto& queue = request->kind() == RequestKind::kSend ? endpoint.sends : endpoint.recvs;
    auto it = std::find_if(queue.begin(), queue.end(),
                           [request](const InprocRequestPtr& r) { return r.get() == request; });
    if (it == queue.end()) return;  // already matched
    queue.erase(it);
    request->Complete(AbortedError(absl::StrCat(
                          "inproc: ", request->kind() == RequestKind::kSend ? "send" : "receive",
                          " (tag ", absl::Hex(request->tag()), ") was cancelled")),
                      0);
  }

  // Marks `rank` gone: its pending requests fail with kAborted, and requests of other ranks
  // that can now never be matched fail with kPeerUnavailable naming it.
  void Close(int rank, absl::string_view reason) {
    const std::string gone = absl::StrCat("rank ", rank, " closed its connection (", reason, ")");
    closed_[rank].store(true, std::memory_order_release);
    {
      Endpoint& own = endpoints_[rank];
      std::lock_guard<std::mutex> lock(own.mu);
      if (own.closed) return;
      own.closed = true;
      own.close_reason = std::string(reason);
      for (const InprocRequestPtr& recv : own.recvs) {
        recv->Complete(
            AbortedError(absl::StrCat("inproc: mesh of rank ", rank, " aborted: ", reason)), 0);
      }
      own.recvs.clear();
      for (const InprocRequestPtr& send : own.sends) {
        send->Complete(PeerUnavailableError(absl::StrCat("inproc: ", gone), rank), 0);
      }
      own.sends.clear();
    }
    for (int other = 0; other < size(); ++other) {
      if (other == rank) continue;
      Endpoint& endpoint = endpoints_[other];
      std::lock_guard<std::mutex> lock(endpoint.mu);
      endpoint.sends.remove_if([&](const InprocRequestPtr& send) {
        if (send->sender != rank) return false;
        send->Complete(
            AbortedError(absl::StrCat("inproc: mesh of rank ", rank, " aborted: ", reason)), 0);
        return true;
      });
      endpoint.recvs.remove_if([&](const InprocRequestPtr& recv) {
        const bool all_gone = std::all_of(recv->sources.begin(), recv->sources.end(),
                                          [&](int source) { return IsClosed(source); });
        if (!all_gone) return false;
        recv->Complete(PeerUnavailableError(absl::StrCat("inproc: ", gone), rank), 0);
        return true;
      });
    }
  }

 private:
  // Read without any endpoint mutex (two closing ranks must not wait on each other): the flag
  // is set before Close() scans the queues and never cleared, so a request posted during the
  // scan either is found by it or sees the flag.
  bool IsClosed(int rank) const { return closed_[rank].load(std::memory_order_acquire); }

  void PostSend(Endpoint& endpoint, const InprocRequestPtr& send)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(endpoint.mu) {
    if (IsClosed(send->sender)) {
      send->Complete(AbortedError(absl::StrCat("inproc: mesh of rank ", send->sender, " aborted")),
                     0);
      return;
    }
    if (endpoint.closed) {
      send->Complete(
          PeerUnavailableError(absl::StrCat("inproc: rank ", send->owner(),
                                            " closed its connection (", endpoint.close_reason, ")"),
                               send->owner()),
          0);
      return;
    }
    for (auto it = endpoint.recvs.begin(); it != endpoint.recvs.end(); ++it) {
      if (Accepts(**it, send->sender, send->tag())) {
        InprocRequestPtr recv = *it;
        endpoint.recvs.erase(it);
        Deliver(*send, *recv);
        return;
      }
    }
    endpoint.sends.push_back(send);
  }

  void PostRecv(Endpoint& endpoint, const InprocRequestPtr& recv)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(endpoint.mu) {
    if (endpoint.closed) {
      recv->Complete(AbortedError(absl::StrCat("inproc: mesh of rank ", recv->owner(),
                                               " aborted: ", endpoint.close_reason)),
                     0);
      return;
    }
    for (auto it = endpoint.sends.begin(); it != endpoint.sends.end(); ++it) {
      if (Accepts(*recv, (*it)->sender, (*it)->tag())) {
        InprocRequestPtr send = *it;
        endpoint.sends.erase(it);
        Deliver(*send, *recv);
        return;
      }
    }
    const bool all_gone = std::all_of(recv->sources.begin(), recv->sources.end(),
                                      [&](int source) { return IsClosed(source); });
    if (all_gone) {
      recv->Complete(PeerUnavailableError(absl::StrCat("inproc: rank ", recv->sources.front(),
                                                       " closed its connection"),
                                          recv->sources.front()),
                     0);
      return;
    }
    endpoint.recvs.push_back(recv);
  }

 private:
  const std::string id_;
  std::vector<Endpoint> endpoints_;
  std::vector<std::atomic<bool>> closed_;
};

void InprocRequest::Cancel() { fabric_->Cancel(this); }

// Process-wide registry of live fabrics, by id. A fabric is pinned until all of its ranks
// have joined: otherwise early ranks that finish (and drop their meshes) before a late rank
// joins would let the late rank create a fresh fabric in which the early ranks never closed,
// and wait forever. A rank that never joins keeps its fabric pinned for the process lifetime.
class FabricRegistry {
 public:
  static FabricRegistry& Get() {
    static FabricRegistry* registry = new FabricRegistry();
    return *registry;
  }

  // Joins `rank` to the fabric `id`, creating it if needed.
  absl::StatusOr<std::shared_ptr<Fabric>> Join(const std::string& id, int rank, int size) {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& entry = fabrics_[id];
    std::shared_ptr<Fabric> fabric = entry.fabric.lock();
    if (fabric == nullptr) {
      fabric = std::make_shared<Fabric>(id, size);
      entry.fabric = fabric;
      entry.pin = fabric;
      entry.joined = 0;
    } else if (fabric->size() != size) {
      return InvalidArgumentError(absl::StrCat("inproc fabric ", id, " has ", fabric->size(),
                                               " ranks but this rank was created with size ", size,
                                               "; every rank must pass the same size"));
    }
    CHORUS_RETURN_IF_ERROR(fabric->Join(rank));
    if (++entry.joined == size) entry.pin.reset();
    // Drop entries whose fabrics are gone so the map does not grow without bound.
    for (auto it = fabrics_.begin(); it != fabrics_.end();) {
      it = it->second.fabric.expired() ? fabrics_.erase(it) : std::next(it);
    }
    return fabric;
  }

  std::string NewId() {
    std::lock_guard<std::mutex> lock(mu_);
    return absl::StrCat(getpid(), ":", next_id_++);
  }

 private:
  struct Entry {
    std::weak_ptr<Fabric> fabric;
    std::shared_ptr<Fabric> pin;  // until every rank has joined
    int joined = 0;
  };

  std::mutex mu_;
  std::map<std::string, Entry> fabrics_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
};

class InprocMesh;

class InprocConnection : public Connection {
 public:
  InprocConnection(InprocMesh* mesh, int peer) : mesh_(mesh), peer_(peer) {}
  int peer() const override { return peer_; }
  RequestPtr Send(Tag tag, ConstMemoryRef buffer) override;
  RequestPtr Recv(Tag tag, MemoryRef buffer) override;
  using Connection::Recv;
  using Connection::Send;

 private:
  InprocMesh* const mesh_;
  const int peer_;
};

// Thread-safe.
class InprocMesh : public Mesh {
 public:
  InprocMesh(std::shared_ptr<Fabric> fabric, int rank) : fabric_(std::move(fabric)), rank_(rank) {
    for (int peer = 0; peer < fabric_->size(); ++peer) {
      connections_.push_back(std::make_unique<InprocConnection>(this, peer));
    }
  }
  ~InprocMesh() override { Abort("mesh destroyed"); }

  int rank() const override { return rank_; }
  int size() const override { return fabric_->size(); }

  absl::StatusOr<Connection*> GetConnection(int peer) override {
    if (peer < 0 || peer >= size() || peer == rank_) {
      return InvalidArgumentError(absl::StrCat("inproc: no connection from rank ", rank_,
                                               " to rank ", peer, " in a mesh of ", size()));
    }
    return connections_[peer].get();
  }

  RequestPtr RecvFromAny(absl::Span<const int> peers, Tag tag, MemoryRef buffer) override {
    auto request = std::make_shared<InprocRequest>(RequestKind::kRecv, -1, tag, fabric_, rank_);
    request->recv_buffer = buffer;
    for (int peer : peers) {
      if (peer < 0 || peer >= size() || peer == rank_) {
        request->Complete(
            InvalidArgumentError(absl::StrCat("inproc: RecvFromAny on rank ", rank_, " names rank ",
                                              peer, ", not a peer in a mesh of ", size())),
            0);
        return request;
      }
      request->sources.push_back(peer);
    }
    if (request->sources.empty()) {
      request->Complete(InvalidArgumentError("inproc: RecvFromAny needs at least one peer"), 0);
      return request;
    }
    fabric_->Post(request);
    return request;
  }

  void Abort(absl::string_view reason) override { fabric_->Close(rank_, reason); }

  RequestPtr PostSend(int peer, Tag tag, ConstMemoryRef buffer) {
    auto request = std::make_shared<InprocRequest>(RequestKind::kSend, peer, tag, fabric_, peer);
    request->send_buffer = buffer;
    request->sender = rank_;
    if (buffer.type != MemoryType::kHost) {
      request->Complete(InvalidArgumentError("inproc: only host memory is supported"), 0);
      return request;
    }
    fabric_->Post(request);
    return request;
  }

  RequestPtr PostRecv(int peer, Tag tag, MemoryRef buffer) {
    auto request = std::make_shared<InprocRequest>(RequestKind::kRecv, peer, tag, fabric_, rank_);
    request->recv_buffer = buffer;
    request->sources.push_back(peer);
    if (buffer.type != MemoryType::kHost) {
      request->Complete(InvalidArgumentError("inproc: only host memory is supported"), 0);
      return request;
    }
    fabric_->Post(request);
    return request;
  }

 private:
  const std::shared_ptr<Fabric> fabric_;
  const int rank_;
  std::vector<std::unique_ptr<InprocConnection>> connections_;
};

RequestPtr InprocConnection::Send(Tag tag, ConstMemoryRef buffer) {
  return mesh_->PostSend(peer_, tag, buffer);
}

RequestPtr InprocConnection::Recv(Tag tag, MemoryRef buffer) {
  return mesh_->PostRecv(peer_, tag, buffer);
}

}  // namespace

std::string InprocDevice::address() const { return absl::StrCat("inproc:", getpid()); }

absl::StatusOr<std::unique_ptr<Mesh>> InprocDevice::CreateMesh(Store& store, int rank, int size,
                                                               const MeshOptions& options,
                                                               Deadline deadline) {
  if (size < 1 || rank < 0 || rank >= size) {
    return InvalidArgumentError(absl::StrCat("inproc: rank ", rank, " is not in [0, ", size, ")"));
  }
  // Every rank counts itself in; the counter tells which generation of meshes under this store
  // scope the rank belongs to, so a communicator recreated under the same prefix gets a fresh
  // fabric instead of the old one.
  CHORUS_ASSIGN_OR_RETURN(const int64_t joined, store.Add("inproc/joined", 1));
  const std::string key = absl::StrCat("inproc/fabric/", (joined - 1) / size);
  if (rank == 0) CHORUS_RETURN_IF_ERROR(store.Set(key, FabricRegistry::Get().NewId()));
  absl::StatusOr<std::string> id = store.Get(key, deadline);
  if (!id.ok()) {
    return Annotate(id.status(), absl::StrCat("inproc: rank ", rank,
                                              " waiting for rank 0 to publish the fabric id in ",
                                              store.Describe()));
  }
  const std::vector<std::string> parts = absl::StrSplit(*id, ':');
  int pid = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &pid)) {
    return InvalidArgumentError(absl::StrCat("inproc: malformed fabric id '", *id, "' under ", key,
                                             " in ", store.Describe()));
  }
  if (pid != getpid()) {
    return InvalidArgumentError(absl::StrCat(
        "inproc: rank 0 runs in process ", pid, " but rank ", rank, " in process ", getpid(),
        "; the in-process transport only connects threads of one process (use tcp)"));
  }
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Fabric> fabric,
                          FabricRegistry::Get().Join(*id, rank, size));
  return std::unique_ptr<Mesh>(new InprocMesh(std::move(fabric), rank));
}

}  // namespace chorus
