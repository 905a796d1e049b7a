#include "chorus/transport/inproc/inproc_device.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "chorus/core/host_identity.h"
#include "chorus/core/status.h"
#include "chorus/transport/matching/match_table.h"

namespace chorus {
namespace {

class Fabric;

// A send or receive posted on a fabric. Lives in the match table of the receiving rank's
// inbox until matched or cancelled; that inbox's mutex guards every access to its buffer.
class InprocRequest : public Request {
 public:
  InprocRequest(RequestKind kind, int peer, Tag tag, std::shared_ptr<Fabric> fabric, int owner)
      : Request(kind, peer, tag), fabric_(std::move(fabric)), owner_(owner) {}

  void Cancel() override;

  // The rank whose inbox queues this request (the receiver's, for sends and receives).
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

// The receiving side of one rank: its posted receives and the sends that reached it before
// their receive (a send waits as itself, and is copied once when matched). Matching and
// copying happen under `mu`, so once a request has been removed under it (cancelled or
// completed) its buffer is never touched again.
struct Inbox {
  explicit Inbox(int size) : table(size) {}
  std::mutex mu;
  bool joined ABSL_GUARDED_BY(mu) = false;
  bool closed ABSL_GUARDED_BY(mu) = false;
  std::string close_reason ABSL_GUARDED_BY(mu);
  matching::MatchTable<InprocRequestPtr, InprocRequestPtr> table ABSL_GUARDED_BY(mu);
};

// Copies a matched message and completes both requests. Caller holds the inbox's mutex.
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
  Fabric(std::string id, int size)
      : id_(std::move(id)),
        closed_(size),
        slots_(new SharedSlot[static_cast<size_t>(size) * SharedSlots::kDepth]()),
        // Left uninitialised: nothing reads a buffer before its owner fills it, and pages
        // never filled cost address space only.
        buffers_(new CacheLine[static_cast<size_t>(size) * kBufferLines]) {
    for (int rank = 0; rank < size; ++rank) inboxes_.push_back(std::make_unique<Inbox>(size));
  }

  SharedSlot* slot(int rank, int index) {
    return &slots_[static_cast<size_t>(rank) * SharedSlots::kDepth + index];
  }
  uint8_t* buffer(int rank) {
    return buffers_[static_cast<size_t>(rank) * kBufferLines].bytes;
  }

  // What rank `own` knows of rank `peer`: its own mesh aborted, the peer's closed, or OK.
  absl::Status Status(int own, int peer) const {
    if (IsClosed(own)) return AbortedError(absl::StrCat("inproc: mesh of rank ", own, " aborted"));
    if (IsClosed(peer)) {
      return PeerUnavailableError(absl::StrCat("inproc: rank ", peer, " closed its connection"),
                                  peer);
    }
    return absl::OkStatus();
  }

  // Whether a send from `from` with `tag` waits in rank `own`'s inbox for its receive.
  bool MessageWaiting(int own, int from, Tag tag) {
    Inbox& inbox = *inboxes_[own];
    std::lock_guard<std::mutex> lock(inbox.mu);
    return inbox.table.OldestUnexpected(from, tag) != nullptr;
  }

  const std::string& id() const { return id_; }
  int size() const { return static_cast<int>(inboxes_.size()); }

  absl::Status Join(int rank) {
    Inbox& inbox = *inboxes_[rank];
    std::lock_guard<std::mutex> lock(inbox.mu);
    if (inbox.joined) {
      return InvalidArgumentError(absl::StrCat("inproc fabric ", id_, ": rank ", rank,
                                               " joined twice; every rank needs its own rank "
                                               "number"));
    }
    inbox.joined = true;
    return absl::OkStatus();
  }

  void Post(const InprocRequestPtr& request) {
    Inbox& inbox = *inboxes_[request->owner()];
    std::lock_guard<std::mutex> lock(inbox.mu);
    if (request->kind() == RequestKind::kSend) {
      PostSend(inbox, request);
    } else {
      PostRecv(inbox, request);
    }
  }

  void Cancel(InprocRequest* request) {
    Inbox& inbox = *inboxes_[request->owner()];
    std::lock_guard<std::mutex> lock(inbox.mu);
    const bool removed =
        request->kind() == RequestKind::kSend
            ? inbox.table.EraseUnexpected(request->sender, request->tag(),
                                          [request](const auto& arrived) {
                                            return arrived.message.get() == request;
                                          })
            : inbox.table.Unpost(request->sources.front(), request->tag(), *request);
    if (!removed) return;  // already matched
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
    const absl::Status aborted =
        AbortedError(absl::StrCat("inproc: mesh of rank ", rank, " aborted: ", reason));
    {
      Inbox& own = *inboxes_[rank];
      std::lock_guard<std::mutex> lock(own.mu);
      if (own.closed) return;
      own.closed = true;
      own.close_reason = std::string(reason);
      for (int peer = 0; peer < size(); ++peer) {
        for (const auto& [tag, recv] : own.table.TakePosted(peer)) recv->Complete(aborted, 0);
        own.table.RetainUnexpected(peer, [&](const auto& arrived) {
          arrived.message->Complete(PeerUnavailableError(absl::StrCat("inproc: ", gone), rank), 0);
          return false;
        });
      }
      own.table.Clear();
    }
    for (int other = 0; other < size(); ++other) {
      if (other == rank) continue;
      Inbox& inbox = *inboxes_[other];
      std::lock_guard<std::mutex> lock(inbox.mu);
      inbox.table.RetainUnexpected(rank, [&](const auto& arrived) {
        arrived.message->Complete(aborted, 0);
        return false;
      });
      for (const auto& [tag, recv] : inbox.table.TakePosted(rank)) {
        if (!AllClosed(recv->sources)) continue;  // still posted on its live sources
        inbox.table.Unpost(rank, tag, *recv);
        recv->Complete(PeerUnavailableError(absl::StrCat("inproc: ", gone), rank), 0);
      }
    }
  }

 private:
  // Read without any inbox mutex (two closing ranks must not wait on each other): the flag
  // is set before Close() scans the queues and never cleared, so a request posted during the
  // scan either is found by it or sees the flag.
  bool IsClosed(int rank) const { return closed_[rank].load(std::memory_order_acquire); }
  bool AllClosed(const std::vector<int>& ranks) const {
    return std::all_of(ranks.begin(), ranks.end(), [&](int rank) { return IsClosed(rank); });
  }

  void PostSend(Inbox& inbox, const InprocRequestPtr& send) ABSL_EXCLUSIVE_LOCKS_REQUIRED(inbox.mu) {
    if (IsClosed(send->sender)) {
      send->Complete(AbortedError(absl::StrCat("inproc: mesh of rank ", send->sender, " aborted")),
                     0);
      return;
    }
    if (inbox.closed) {
      send->Complete(
          PeerUnavailableError(absl::StrCat("inproc: rank ", send->owner(),
                                            " closed its connection (", inbox.close_reason, ")"),
                               send->owner()),
          0);
      return;
    }
    if (std::optional<InprocRequestPtr> recv = inbox.table.PopPosted(send->sender, send->tag())) {
      Deliver(*send, **recv);
      return;
    }
    inbox.table.AddUnexpected(send->sender, send->tag(), send);
  }

  void PostRecv(Inbox& inbox, const InprocRequestPtr& recv) ABSL_EXCLUSIVE_LOCKS_REQUIRED(inbox.mu) {
    if (inbox.closed) {
      recv->Complete(AbortedError(absl::StrCat("inproc: mesh of rank ", recv->owner(),
                                               " aborted: ", inbox.close_reason)),
                     0);
      return;
    }
    const int from = inbox.table.OldestUnexpectedAmong(recv->sources, recv->tag());
    if (from >= 0) {
      Deliver(**inbox.table.PopUnexpected(from, recv->tag()), *recv);
      return;
    }
    if (AllClosed(recv->sources)) {
      recv->Complete(PeerUnavailableError(absl::StrCat("inproc: rank ", recv->sources.front(),
                                                       " closed its connection"),
                                          recv->sources.front()),
                     0);
      return;
    }
    inbox.table.PostOnEach(recv->sources, recv->tag(), recv);
  }

 private:
  const std::string id_;
  std::vector<std::unique_ptr<Inbox>> inboxes_;
  std::vector<std::atomic<bool>> closed_;
  const std::unique_ptr<SharedSlot[]> slots_;  // kDepth per rank, rank after rank
  // The buffers are cache-line aligned, as shared_slots.h promises.
  struct alignas(64) CacheLine {
    uint8_t bytes[64];
  };
  static constexpr size_t kBufferLines = SharedSlots::kBufferBytes / sizeof(CacheLine);
  const std::unique_ptr<CacheLine[]> buffers_;  // kBufferLines per rank, rank after rank
};

// The fabric's shared slots: memory of this process, which its rank threads share.
class InprocSlots final : public SharedSlots {
 public:
  InprocSlots(std::shared_ptr<Fabric> fabric, int rank)
      : fabric_(std::move(fabric)), rank_(rank), oversubscribed_(fabric_->size() > UsableCores()) {}

  absl::Status AttachAll() override { return absl::OkStatus(); }
  SharedSlot* Slot(int rank, int index) override { return fabric_->slot(rank, index); }
  uint8_t* Buffer(int rank) override { return fabric_->buffer(rank); }
  absl::Status PeerStatus(int rank) override { return fabric_->Status(rank_, rank); }
  bool MessageWaiting(int rank, Tag tag) override {
    return fabric_->MessageWaiting(rank_, rank, tag);
  }
  bool oversubscribed() const override { return oversubscribed_; }

 private:
  const std::shared_ptr<Fabric> fabric_;
  const int rank_;
  const bool oversubscribed_;
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
  InprocMesh(std::shared_ptr<Fabric> fabric, int rank)
      : fabric_(std::move(fabric)), rank_(rank), slots_(fabric_, rank) {
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
    request->sources.assign(peers.begin(), peers.end());
    const absl::Status peers_ok = matching::CheckAnyPeers(peers, rank_, size());
    if (!peers_ok.ok()) {
      request->Complete(peers_ok, 0);
      return request;
    }
    fabric_->Post(request);
    return request;
  }

  void Abort(absl::string_view reason) override { fabric_->Close(rank_, reason); }
  // Threads of one process.
  std::vector<int> HostOfRanks() const override { return std::vector<int>(size(), 0); }
  SharedSlots* ClaimSharedSlots() override {
    return slots_claimed_.exchange(true) ? nullptr : &slots_;
  }

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
  InprocSlots slots_;
  std::atomic<bool> slots_claimed_{false};
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
