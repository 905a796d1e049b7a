#include "chorus/transport/shm/engine.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "chorus/core/host_identity.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"
#include "chorus/transport/shm/bytes.h"
#include "chorus/transport/shm/doorbell.h"
#include "chorus/transport/shm/peer_inbound.h"
#include "chorus/transport/shm/peer_liveness.h"
#include "chorus/transport/shm/peer_outbound.h"

namespace chorus::shm {
namespace {

// The background thread asleep on the doorbell wakes this often to check liveness.
constexpr absl::Duration kIdleSleep = absl::Milliseconds(50);
// While threads wait (and so drive progress), the background thread only polls pidfds.
constexpr int kLivenessPollMillis = 5;
// Cancel of a send whose receiver is copying out of it waits this long for the copy to end.
constexpr absl::Duration kCancelReadWait = absl::Seconds(10);

std::string TagText(Tag tag) { return absl::StrCat("0x", absl::Hex(tag)); }

std::string Describe(const ShmRequest& request, absl::Span<const int> any_peers) {
  if (request.kind() == RequestKind::kSend) {
    return absl::StrCat("send to rank ", request.peer(), " (tag ", TagText(request.tag()), ")");
  }
  if (!any_peers.empty()) {
    return absl::StrCat("receive from any of ranks [", absl::StrJoin(any_peers, ","), "] (tag ",
                        TagText(request.tag()), ")");
  }
  return absl::StrCat("receive from rank ", request.peer(), " (tag ", TagText(request.tag()), ")");
}

}  // namespace

// The Connection handed to users: a peer index over the engine.
class ShmConnection final : public Connection {
 public:
  ShmConnection(Engine& engine, int peer) : engine_(engine), peer_(peer) {}
  int peer() const override { return peer_; }
  RequestPtr Send(Tag tag, ConstMemoryRef buffer) override {
    return engine_.Send(peer_, tag, buffer);
  }
  RequestPtr Recv(Tag tag, MemoryRef buffer) override { return engine_.Recv(peer_, tag, buffer); }
  // Eager messages and staging chunks go to the sink straight from shared memory, saving the
  // receiver a copy; a message read by cross-memory attach lands in the buffer.
  RequestPtr RecvWithSink(Tag tag, MemoryRef buffer, RecvSink* sink) override {
    return engine_.Recv(peer_, tag, buffer, sink);
  }

 private:
  Engine& engine_;
  const int peer_;
};

// A message that arrived before its receive was posted.
struct Engine::Unexpected {
  enum class Kind {
    kData,       // all of it is here (eager, or pulled)
    kAnnounced,  // a large message's descriptor: the data is still in the sender's buffer
    kPulling,    // being pulled through the staging area into a buffer of ours
  };
  Kind kind = Kind::kData;
  Bytes data;             // kData
  uint32_t slot_ref = 0;  // kAnnounced, kPulling
  uint64_t length = 0;
  uint64_t address = 0;
};

// One peer: who it is, whether it failed, and the two directions between it and this rank.
struct Engine::Peer {
  int rank = -1;
  InboxAddress address;
  absl::Status failure;   // once set, later requests fail with it
  bool departed = false;  // the failure is a clean close (its mesh was destroyed)
  bool connected = false;
  std::unique_ptr<ShmConnection> connection;

  PeerOutbound out;
  PeerInbound in;
  LargePath large_path = LargePath::kStaging;  // how this rank reads the peer's large messages

  // A rank of this process (a thread): it reads this rank's memory directly.
  bool InThisProcess() const { return address.pid == getpid(); }
};

ShmRequest::ShmRequest(std::shared_ptr<Engine> engine, RequestKind kind, int peer, Tag tag,
                       char* data, size_t size)
    : Request(kind, peer, tag), engine_(std::move(engine)), data_(data), size_(size) {}

absl::Status ShmRequest::Wait(Deadline deadline) { return engine_->Wait(*this, deadline); }

void ShmRequest::Cancel() { engine_->Cancel(*this); }

Engine::Engine(Config config)
    : options_(config.options),
      rank_(config.rank),
      size_(config.size),
      job_hash_(config.job_hash),
      inbox_(std::move(config.inbox)),
      header_(inbox_->header()),
      liveness_(mu_, config.size),
      matching_(config.size),
      held_(mu_, config.size),
      waiters_(header_, config.options.spin, config.addresses) {
  peers_.resize(size_);
  slot_bases_.assign(size_, nullptr);
  slot_bases_[rank_] = inbox_->shared_slots();
  for (int r = 0; r < size_; ++r) {
    Peer& peer = peers_[r];
    peer.rank = r;
    peer.address = config.addresses[r];
    if (r == rank_) continue;
    peer.connection = std::make_unique<ShmConnection>(*this, r);
    peer.in = PeerInbound(inbox_->area(r));
  }
}

std::shared_ptr<Engine> Engine::Start(Config config) {
  std::shared_ptr<Engine> engine(new Engine(std::move(config)));
  engine->background_ = std::thread([raw = engine.get()] { raw->BackgroundLoop(); });
  return engine;
}

Engine::~Engine() { Shutdown(); }

// ------------------------------------------------------------------------------------------
// Posting

std::shared_ptr<ShmRequest> Engine::NewRequest(RequestKind kind, int peer, Tag tag, void* data,
                                               size_t size) {
  return std::make_shared<ShmRequest>(shared_from_this(), kind, peer, tag, static_cast<char*>(data),
                                      size);
}

void Engine::TrackIfPending(const std::shared_ptr<ShmRequest>& request) {
  // Most small sends and many receives complete while they are posted; only the others need
  // an owner here (and the hash map insert and erase that costs).
  if (request->stage_ != ShmRequest::Stage::kDone) pending_.emplace(request.get(), request);
}

namespace {

// Received bytes go to the receive's sink when it has one, else into its buffer.
void Deliver(RecvSink* sink, char* buffer, uint64_t offset, const char* data, uint64_t length) {
  if (sink != nullptr) {
    sink->Consume(offset, data, length);
  } else {
    std::memcpy(buffer + offset, data, length);
  }
}

absl::Status CheckBuffer(MemoryType type, const void* data, size_t size) {
  if (type != MemoryType::kHost) {
    return InvalidArgumentError(
        "shm: the shared-memory transport moves host memory only; use the CUDA IPC transport "
        "for device buffers");
  }
  if (data == nullptr && size != 0) {
    return InvalidArgumentError(absl::StrCat("shm: a null buffer of ", size, " bytes was passed"));
  }
  return absl::OkStatus();
}

}  // namespace

Connection* Engine::GetConnection(int peer) {
  std::lock_guard<std::mutex> lock(mu_);
  Connect(peers_[peer]);
  return peers_[peer].connection.get();
}

RequestPtr Engine::Send(int peer_rank, Tag tag, ConstMemoryRef buffer) {
  std::shared_ptr<ShmRequest> request;
  {
    std::lock_guard<std::mutex> lock(mu_);
    request =
        NewRequest(RequestKind::kSend, peer_rank, tag, const_cast<void*>(buffer.data), buffer.size);
    Peer& peer = peers_[peer_rank];
    absl::Status check = CheckBuffer(buffer.type, buffer.data, buffer.size);
    if (check.ok()) check = closed_;
    if (check.ok()) {
      Connect(peer);
      check = peer.failure;
    }
    if (!check.ok()) {
      Complete(*request, std::move(check));
    } else {
      request->stage_ = ShmRequest::Stage::kQueued;
      peer.out.QueueSend(request);
      Flush(peer);
    }
    TrackIfPending(request);
  }
  waiters_.WakeIfCompleted();
  return request;
}

RequestPtr Engine::Recv(int peer_rank, Tag tag, MemoryRef buffer, RecvSink* sink) {
  std::shared_ptr<ShmRequest> request;
  {
    std::lock_guard<std::mutex> lock(mu_);
    request = NewRequest(RequestKind::kRecv, peer_rank, tag, buffer.data, buffer.size);
    request->sink_ = sink;
    Peer& peer = peers_[peer_rank];
    absl::Status check = CheckBuffer(buffer.type, buffer.data, buffer.size);
    if (check.ok()) check = closed_;
    if (check.ok()) Connect(peer);
    if (!check.ok()) {
      Complete(*request, std::move(check));
    } else if (!MatchUnexpected(peer, request)) {
      if (!peer.failure.ok()) {
        Complete(*request, peer.failure);
      } else {
        request->stage_ = ShmRequest::Stage::kPosted;
        matching_.Post(peer_rank, tag, request);
      }
    }
    TrackIfPending(request);
  }
  waiters_.WakeIfCompleted();
  return request;
}

RequestPtr Engine::RecvFromAny(absl::Span<const int> peers, Tag tag, MemoryRef buffer,
                               std::shared_ptr<ReceiveClaim> claim, int part) {
  std::shared_ptr<ShmRequest> request;
  {
    std::lock_guard<std::mutex> lock(mu_);
    request = NewRequest(RequestKind::kRecv, -1, tag, buffer.data, buffer.size);
    request->any_peers_.assign(peers.begin(), peers.end());
    request->claim_ = std::move(claim);
    request->part_ = part;
    absl::Status check = CheckBuffer(buffer.type, buffer.data, buffer.size);
    if (check.ok()) check = matching::CheckAnyPeers(peers, rank_, size_);
    if (check.ok()) check = closed_;
    if (!check.ok()) {
      Complete(*request, std::move(check));
    } else {
      for (int r : peers) Connect(peers_[r]);
      // Take the oldest message waiting on any of the peers.
      bool matched = false;
      while (!matched) {
        const int oldest = matching_.OldestUnexpectedAmong(peers, tag);
        if (oldest < 0) break;
        matched = MatchUnexpected(peers_[oldest], request);
      }
      if (!matched) {
        absl::Status failure = AnyFailure(peers);
        if (!failure.ok()) {
          Complete(*request, std::move(failure));
        } else if (request->claim_ != nullptr && request->claim_->WonByAnother(part)) {
          Complete(*request, WithdrawnPartError(rank_));  // settled already: never posted
        } else {
          request->stage_ = ShmRequest::Stage::kPosted;
          std::vector<int> live;
          for (int r : peers) {
            if (peers_[r].failure.ok()) live.push_back(r);
          }
          matching_.PostOnEach(live, tag, request);
        }
      }
    }
    TrackIfPending(request);
  }
  waiters_.WakeIfCompleted();
  return request;
}

// ------------------------------------------------------------------------------------------
// Connecting

void Engine::Connect(Peer& peer) {
  if (peer.connected || !peer.failure.ok()) return;
  const std::string who = absl::StrCat("rank ", peer.rank, " (pid ", peer.address.pid, ")");
  if (peer.address.host != LocalHostIdentity()) {
    FailPeer(peer, PeerUnavailableError(
                       absl::StrCat("shm: ", who,
                                    " is on another host or in another pid "
                                    "namespace (host identity ",
                                    peer.address.host, ", this rank's ", LocalHostIdentity(),
                                    "); shared memory reaches only ranks on the same host: use "
                                    "the tcp transport for it"),
                       peer.rank));
    return;
  }
  // Watched before the inbox is attached, so a recycled pid cannot slip in (PeerLiveness).
  const bool same_process = peer.InThisProcess();
  if (!same_process && !liveness_.Watch(peer.rank, peer.address.pid)) {
    FailUnreachable(peer,
                    PeerUnavailableError(absl::StrCat("shm: ", who, " is not running"), peer.rank));
    return;
  }
  auto outbox = PeerInbox::Attach(peer.address, peer.rank, rank_, size_);
  if (!outbox.ok()) {
    FailUnreachable(peer, outbox.status());
    return;
  }
  peer.out.Attach(std::move(outbox).value());
  const InboxHeader& header = peer.out.header();
  auto large_path = ChooseLargePath(options_.single_copy, rank_, peer.rank, peer.address.pid,
                                    header.probe_address, header.probe_value);
  if (!large_path.ok()) {
    FailPeer(peer, large_path.status());
    return;
  }
  peer.large_path = *large_path;
  peer.out.Open(options_.eager_bytes, rank_, job_hash_);
  peer.connected = true;
  active_.push_back(peer.rank);
  CHORUS_LOG(kInfo, "shm") << "rank " << rank_ << " attached to " << who << "; eager up to "
                           << peer.out.eager_limit() << " bytes, larger messages from it by "
                           << LargePathName(peer.large_path);
}

void Engine::FailUnreachable(Peer& peer, absl::Status status) {
  // A peer that sent to us and then exited or closed its mesh before we attached back: every
  // send it completed is whole in our inbox (eager records, and nothing else, since only our
  // replies complete a large one), so it is still delivered before the peer counts as gone.
  if (peer.in.writer_attached()) Drain(peer);
  FailPeer(peer, std::move(status));
}

void Engine::ScanAttachments() {
  const uint64_t epoch = header_.attach_epoch.load(std::memory_order_acquire);
  if (epoch == seen_attach_epoch_) return;
  seen_attach_epoch_ = epoch;
  for (Peer& peer : peers_) {
    if (peer.rank == rank_ || peer.connected || !peer.failure.ok()) continue;
    if (!peer.in.writer_attached()) continue;
    if (!peer.in.WrittenBy(job_hash_, peer.rank)) {
      FailPeer(peer,
               PeerUnavailableError(
                   absl::StrCat("shm: the writer of rank ", peer.rank, "'s area in rank ", rank_,
                                "'s inbox belongs to another job or rank; its "
                                "messages are ignored"),
                   peer.rank));
      continue;
    }
    // It sends to us: attach back for replies and watch its liveness.
    Connect(peer);
  }
}

// ------------------------------------------------------------------------------------------
// Progress

void Engine::Progress() {
  ScanAttachments();
  if (!held_.empty()) PullExpiredAnnouncements();
  for (size_t i = 0; i < active_.size(); ++i) {
    Peer& peer = peers_[active_[i]];
    // Read before draining: what the peer wrote before closing is still delivered.
    const uint32_t closed = peer.out.header().closed.load(std::memory_order_acquire);
    Drain(peer);
    if (!peer.failure.ok()) continue;
    if (closed != kOpen) {
      const bool destroyed = closed == kClosedDestroyed;
      FailPeer(
          peer,
          PeerUnavailableError(absl::StrCat("shm: rank ", peer.rank, " (pid ", peer.address.pid,
                                            ") ", destroyed ? "destroyed" : "aborted",
                                            " its mesh; nothing more comes from it"),
                               peer.rank),
          destroyed);
      continue;
    }
    Flush(peer);
  }
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [this](int r) { return !peers_[r].failure.ok(); }),
                active_.end());
}

void Engine::Drain(Peer& peer) {
  bool consumed = false;
  bool corrupt = false;
  while (peer.failure.ok()) {
    const Record* next = peer.in.Next(&corrupt);
    if (next == nullptr) break;
    const Record record = *next;
    HandleRecord(peer, record, reinterpret_cast<const char*>(next + 1));
    peer.in.Consume(record);
    consumed = true;
  }
  if (corrupt) {
    FailPeer(peer, PeerUnavailableError(absl::StrCat("shm: rank ", peer.rank,
                                                     " wrote a malformed record into "
                                                     "rank ",
                                                     rank_,
                                                     "'s inbox (memory corruption, or a "
                                                     "different Chorus version)"),
                                        peer.rank));
    return;
  }
  if (!consumed || !peer.connected) return;
  // Space was freed: wake the peer if it waits for ring space or a staging chunk. Both sides
  // swap `want_space` (after freeing, before looking again), so one of them sees the other.
  if (peer.in.TakeWantSpace()) RingDoorbell(peer.out.header());
}

void Engine::HandleRecord(Peer& peer, const Record& record, const char* payload) {
  const bool slot_ok = SlotIndex(record.slot_ref) < kSlotsPerPeer;
  switch (record.type) {
    case RecordType::kEager:
      DeliverEager(peer, record.tag, payload, record.length);
      return;
    case RecordType::kAnnounce:
      if (slot_ok) DeliverAnnouncement(peer, record);
      break;
    case RecordType::kClearToSend:
      if (slot_ok) peer.out.ClearedToSend(record.slot_ref);
      break;
    case RecordType::kChunk:
      if (slot_ok) OnChunk(peer, record);
      break;
    case RecordType::kFinished:
      if (slot_ok) OnFinished(peer, record.slot_ref, record.length);
      break;
    default:
      break;
  }
  if (!slot_ok || record.type < RecordType::kEager || record.type > RecordType::kFinished) {
    FailPeer(peer, PeerUnavailableError(
                       absl::StrCat("shm: rank ", peer.rank, " sent an invalid record (type ",
                                    static_cast<uint32_t>(record.type), ")"),
                       peer.rank));
  }
}

void Engine::DeliverEager(Peer& peer, Tag tag, const char* data, uint64_t length) {
  while (std::shared_ptr<ShmRequest> request = TakePosted(peer, tag)) {
    if (!WinClaim(*request, /*tentative=*/false)) continue;
    FinishEagerReceive(*request, peer.rank, data, length);
    return;
  }
  Unexpected message;
  message.data = Bytes::CopyOf(data, length);
  matching_.AddUnexpected(peer.rank, tag, std::move(message));
}

void Engine::FinishEagerReceive(ShmRequest& request, int from, const char* data, uint64_t length) {
  if (length > request.size_) {
    Complete(request,
             InvalidArgumentError(absl::StrCat("shm: the message from rank ", from, " with tag ",
                                               TagText(request.tag()), " is ", length,
                                               " bytes, longer than the receive buffer of ",
                                               request.size_, " bytes; it was discarded")),
             0, from);
    return;
  }
  if (length != 0) request.Store(0, data, length);
  Complete(request, absl::OkStatus(), length, from);
}

void ShmRequest::Store(uint64_t offset, const char* data, uint64_t length) {
  Deliver(sink_, data_, offset, data, length);
}

void Engine::DeliverAnnouncement(Peer& peer, const Record& record) {
  // Drained from a peer we never attached to (FailUnreachable): without our kFinished or
  // kClearToSend its send cannot have completed, and its buffer is out of reach.
  if (!peer.connected) return;
  ShmRequest* front = PeekPosted(peer, record.tag);
  while (front != nullptr && !WinClaim(*front, /*tentative=*/true)) {
    front = PeekPosted(peer, record.tag);
  }
  if (front == nullptr) {
    // Held as a descriptor, so a receive posted soon still gets the single copy; pulled after
    // the hold time, so the sender completes even if no receive comes for a while.
    Unexpected message;
    message.kind = Unexpected::Kind::kAnnounced;
    message.slot_ref = record.slot_ref;
    message.length = record.length;
    message.address = record.arg;
    const uint64_t arrival = matching_.AddUnexpected(peer.rank, record.tag, std::move(message));
    held_.Hold({peer.rank, record.tag, arrival}, options_.HoldFor(record.length),
               peer.in.UnclaimedSlots());
    return;
  }
  const Claim claim =
      ClaimAnnouncement(peer, record.slot_ref, record.length, record.arg, front->size_);
  SettleClaim(*front, claim != Claim::kWithdrawn);
  if (claim == Claim::kWithdrawn) return;  // cancelled by its sender: never a message
  ReceiveAnnounced(peer, TakePosted(peer, record.tag), claim, record.slot_ref, record.length,
                   record.arg);
}

Engine::Claim Engine::ClaimAnnouncement(Peer& peer, uint32_t slot_ref, uint64_t length,
                                        uint64_t address, size_t capacity) {
  Claim claim = Claim::kRead;
  SlotState target = kSlotReading;
  if (length > capacity) {
    claim = Claim::kTooLong;
    target = kSlotDone;
  } else if (peer.large_path == LargePath::kStaging && InPlace(peer, address, length) == nullptr) {
    claim = Claim::kStage;
    target = kSlotStaging;
  }
  if (!peer.in.Claim(slot_ref, target)) return Claim::kWithdrawn;
  return claim;
}

void Engine::ReceiveAnnounced(Peer& peer, const std::shared_ptr<ShmRequest>& request, Claim claim,
                              uint32_t slot_ref, uint64_t length, uint64_t address) {
  switch (claim) {
    case Claim::kWithdrawn:
      return;
    case Claim::kTooLong:
      WriteControl(peer, RecordType::kFinished, slot_ref, kFinishDiscarded);
      FinishEagerReceive(*request, peer.rank, nullptr, length);  // fails: too long
      return;
    case Claim::kStage: {
      request->stage_ = ShmRequest::Stage::kStreaming;
      request->slot_ref_ = slot_ref;
      request->source_ = peer.rank;
      peer.in.streams().StartInto(slot_ref, request, request->tag(), length);
      WriteControl(peer, RecordType::kClearToSend, slot_ref);
      return;
    }
    case Claim::kRead:
      Complete(*request,
               ReadAnnounced(peer, request->data_, request->sink_, slot_ref, length, address),
               length, peer.rank);
      return;
  }
}

absl::Status Engine::ReadAnnounced(Peer& peer, char* into, RecvSink* sink, uint32_t slot_ref,
                                   uint64_t length, uint64_t address) {
  absl::Status status;
  if (const char* source = InPlace(peer, address, length)) {
    Deliver(sink, into, 0, source, length);
  } else if (sink != nullptr) {
    status = CrossMemoryReadToSink(peer.address.pid, *sink, address, length);
  } else {
    status = CrossMemoryRead(peer.address.pid, into, address, length);
  }
  peer.in.FinishRead(slot_ref);
  WriteControl(peer, RecordType::kFinished, slot_ref,
               status.ok() ? kFinishDelivered : kFinishReadFailed);
  if (status.ok()) return status;
  return MakeError(
      GetErrorKind(status),
      absl::StrCat("shm: reading the message of rank ", peer.rank, " failed: ", status.message()),
      peer.rank);
}

const char* Engine::InPlace(Peer& peer, uint64_t address, uint64_t length) {
  const char* const at = reinterpret_cast<const char*>(address);
  if (peer.large_path == LargePath::kMemcpy) return at;
  if (peer.InThisProcess()) {  // forced off memcpy: only the arena, which is ours
    const Arena* arena = Arena::IfCreated();
    return arena != nullptr && arena->Contains(at, length) ? at : nullptr;
  }
  return peer.in.InArena(peer.out.header(), peer.address.pid, peer.rank, rank_, address, length);
}

void Engine::PublishArena(const Arena& arena) {
  const Arena::Identity& identity = arena.identity();
  header_.arena_fd = identity.fd;
  header_.arena_base = identity.base;
  header_.arena_nonce = identity.nonce;
  header_.arena_bytes.store(identity.bytes, std::memory_order_release);
  arena_published_ = true;
}

void Engine::PullExpiredAnnouncements() {
  const auto now = std::chrono::steady_clock::now();
  HoldSchedule::Entry held;
  while (held_.PopDue(now, &held)) {
    Peer& peer = peers_[held.peer];
    if (!peer.failure.ok()) continue;
    const auto is_held = [&](const Matching::Arrived& a) { return a.arrival == held.arrival; };
    Matching::Arrived* arrived = matching_.FindUnexpected(peer.rank, held.tag, is_held);
    // Gone (matched, withdrawn, failed) or no longer a bare descriptor: nothing to do.
    if (arrived == nullptr || arrived->message.kind != Unexpected::Kind::kAnnounced) continue;
    Unexpected* message = &arrived->message;
    bool keep = true;
    switch (ClaimAnnouncement(peer, message->slot_ref, message->length, message->address,
                              message->length)) {
      case Claim::kWithdrawn:
      case Claim::kTooLong:  // cannot happen: the capacity is the length
        keep = false;
        break;
      case Claim::kRead: {
        Bytes data = Bytes::Uninitialized(message->length);
        const absl::Status status =
            ReadAnnounced(peer, data.data.get(), /*sink=*/nullptr, message->slot_ref,
                          message->length, message->address);
        if (status.ok()) {
          message->kind = Unexpected::Kind::kData;
          message->data = std::move(data);
        } else {
          CHORUS_LOG(kWarn, "shm")
              << "rank " << rank_ << ": dropped an unmatched message: " << status.message();
          keep = false;
        }
        break;
      }
      case Claim::kStage: {
        message->kind = Unexpected::Kind::kPulling;
        peer.in.streams().StartPull(message->slot_ref, held.tag, message->length);
        WriteControl(peer, RecordType::kClearToSend, message->slot_ref);
        break;
      }
    }
    if (!keep) matching_.EraseUnexpected(peer.rank, held.tag, is_held);
  }
}

void Engine::TakeOverPull(Peer& peer, const std::shared_ptr<ShmRequest>& request,
                          const Unexpected& message) {
  if (message.length > request->size_) {
    peer.in.streams().Discard(message.slot_ref);
    FinishEagerReceive(*request, peer.rank, nullptr, message.length);  // fails: too long
    return;
  }
  peer.in.streams().TakeOver(message.slot_ref, request);
  request->stage_ = ShmRequest::Stage::kStreaming;
  request->slot_ref_ = message.slot_ref;
  request->source_ = peer.rank;
}

void Engine::FinishPulled(Peer& peer, InboundStreams::Stream& stream) {
  Matching::Arrived* arrived =
      matching_.FindUnexpected(peer.rank, stream.tag, [&](const Matching::Arrived& a) {
        return a.message.kind == Unexpected::Kind::kPulling &&
               a.message.slot_ref == stream.slot_ref;
      });
  if (arrived == nullptr) return;
  arrived->message.kind = Unexpected::Kind::kData;
  arrived->message.data = std::move(stream.held);
}

void Engine::OnChunk(Peer& peer, const Record& record) {
  InboundStreams::Stream stream;
  switch (peer.in.streams().OnChunk(record, &stream)) {
    case InboundStreams::ChunkResult::kInvalid:
      FailPeer(peer, PeerUnavailableError(absl::StrCat("shm: rank ", peer.rank,
                                                       " sent a staging chunk that does not "
                                                       "continue any transfer (protocol error)"),
                                          peer.rank));
      return;
    case InboundStreams::ChunkResult::kPartial:
      return;
    case InboundStreams::ChunkResult::kComplete:
      break;
  }
  if (stream.into == InboundStreams::Stream::Into::kRequest) {
    Complete(*stream.request, absl::OkStatus(), stream.length, peer.rank);
  } else if (stream.into == InboundStreams::Stream::Into::kHeld) {
    FinishPulled(peer, stream);  // now an ordinary unexpected message
  }
  WriteControl(peer, RecordType::kFinished, stream.slot_ref, kFinishDelivered);
}

void Engine::OnFinished(Peer& peer, uint32_t slot_ref, uint64_t outcome) {
  const std::shared_ptr<ShmRequest> request = peer.out.Finished(slot_ref);
  if (request == nullptr) return;  // about an earlier use of the slot
  if (request->IsDone()) return;   // streamed in full already, or cancelled
  if (outcome == kFinishReadFailed) {
    Complete(*request, InternalError(absl::StrCat("shm: rank ", peer.rank,
                                                  " could not read this send's buffer with "
                                                  "process_vm_readv; is the buffer still valid?")));
    return;
  }
  Complete(*request, absl::OkStatus(), request->size_);
}

// ------------------------------------------------------------------------------------------
// Writing to a peer

void Engine::WriteControl(Peer& peer, RecordType type, uint32_t slot_ref, uint64_t length) {
  peer.out.QueueControl(type, slot_ref, length);
  Flush(peer);
}

// What the engine does as a peer's outbound writes sends.
struct Engine::OutboundEvents {
  Engine& engine;

  // A send from this process's arena publishes the arena first, so the peer can read it in place.
  void Announcing(const ShmRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(engine.mu_) {
    if (engine.arena_published_) return;
    const Arena* arena = Arena::IfCreated();
    if (arena != nullptr && arena->Contains(request.data_, request.size_)) {
      engine.PublishArena(*arena);
    }
  }
  void Sent(ShmRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(engine.mu_) {
    engine.Complete(request, absl::OkStatus(), request.size_);
  }
};

void Engine::Flush(Peer& peer) {
  if (!peer.connected || !peer.failure.ok()) return;
  OutboundEvents events{*this};
  peer.out.Flush(events);
}

// ------------------------------------------------------------------------------------------
// Matching

ShmRequest* Engine::PeekPosted(Peer& peer, Tag tag) {
  std::shared_ptr<ShmRequest>* front = matching_.FrontPosted(peer.rank, tag);
  return front == nullptr ? nullptr : front->get();
}

std::shared_ptr<ShmRequest> Engine::TakePosted(Peer& peer, Tag tag) {
  return matching_.PopPosted(peer.rank, tag).value_or(nullptr);
}

void Engine::Unpost(ShmRequest& request) {
  if (request.any_peers_.empty()) {
    matching_.Unpost(request.peer(), request.tag(), request);
    return;
  }
  // Posted on the peers that were live then, each of which may have failed since.
  for (int r : request.any_peers_) matching_.Unpost(r, request.tag(), request);
}

bool Engine::WinClaim(ShmRequest& request, bool tentative) {
  if (request.claim_ == nullptr) return true;
  if (tentative ? request.claim_->Hold(request.part_) : request.claim_->TryClaim(request.part_)) {
    return true;
  }
  Unpost(request);
  Complete(request, WithdrawnPartError(rank_));
  return false;
}

void Engine::SettleClaim(ShmRequest& request, bool taken) {
  if (request.claim_ == nullptr) return;
  if (taken) {
    request.claim_->Confirm(request.part_);
  } else {
    request.claim_->Release();
  }
}

bool Engine::MatchUnexpected(Peer& peer, const std::shared_ptr<ShmRequest>& request) {
  while (const Matching::Arrived* oldest = matching_.OldestUnexpected(peer.rank, request->tag())) {
    const bool announced = oldest->message.kind == Unexpected::Kind::kAnnounced;
    if (!WinClaim(*request, /*tentative=*/announced)) return true;  // settled: withdrawn
    Unexpected message = *matching_.PopUnexpected(peer.rank, request->tag());
    switch (message.kind) {
      case Unexpected::Kind::kData:
        FinishEagerReceive(*request, peer.rank, message.data.data.get(), message.data.size);
        return true;
      case Unexpected::Kind::kPulling:
        TakeOverPull(peer, request, message);
        return true;
      case Unexpected::Kind::kAnnounced: {
        const Claim claim = ClaimAnnouncement(peer, message.slot_ref, message.length,
                                              message.address, request->size_);
        SettleClaim(*request, claim != Claim::kWithdrawn);
        if (claim != Claim::kWithdrawn) {
          ReceiveAnnounced(peer, request, claim, message.slot_ref, message.length, message.address);
          return true;
        }
        break;  // withdrawn by its sender: it never was a message
      }
    }
  }
  return false;
}

// ------------------------------------------------------------------------------------------
// Completion, cancellation, failure

void Engine::Complete(ShmRequest& request, absl::Status status, size_t bytes, int from) {
  std::shared_ptr<ShmRequest> keep;  // the request may have no other owner
  auto it = pending_.find(&request);
  if (it != pending_.end()) {
    keep = std::move(it->second);
    pending_.erase(it);
  }
  request.stage_ = ShmRequest::Stage::kDone;
  if (request.Complete(std::move(status), bytes, from)) {
    waiters_.Completed();
  }
}

void Engine::Cancel(ShmRequest& request) {
  bool receiver_reading = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (request.IsDone()) return;
    const absl::Status cancelled =
        AbortedError(absl::StrCat("shm: ", Describe(request, request.any_peers_), " was cancelled"),
                     request.peer());
    const bool is_send = request.kind() == RequestKind::kSend;
    Peer* peer = request.peer() >= 0 ? &peers_[request.peer()] : nullptr;
    switch (request.stage_) {
      case ShmRequest::Stage::kNew:
      case ShmRequest::Stage::kDone:
        break;
      case ShmRequest::Stage::kQueued: {
        peer->out.Unqueue(request);
        Complete(request, cancelled);
        break;
      }
      case ShmRequest::Stage::kPosted:
        Unpost(request);
        Complete(request, cancelled);
        break;
      case ShmRequest::Stage::kStreaming:
        if (!is_send) {
          // Later chunks are drained and dropped.
          peers_[request.source_].in.streams().Discard(request.slot_ref_);
          Complete(request, cancelled);
          break;
        }
        [[fallthrough]];
      case ShmRequest::Stage::kAnnounced: {
        switch (peer->out.Cancel(request)) {
          case PeerOutbound::Cancelled::kWithdrawn:
          case PeerOutbound::Cancelled::kCopied:  // its slot is freed by the peer's kFinished
            Complete(request, cancelled);
            break;
          case PeerOutbound::Cancelled::kDelivered:
            Complete(request, absl::OkStatus(), request.size_);
            break;
          case PeerOutbound::Cancelled::kBeingRead:
            receiver_reading = true;
            break;
        }
        break;
      }
    }
  }
  if (receiver_reading) FinishCancelAfterRead(request);
  waiters_.WakeIfCompleted();
}

void Engine::FinishCancelAfterRead(ShmRequest& request) {
  // The receiver is copying straight out of this send's buffer. The promise of Cancel is that
  // the buffer is left alone once it returns, so wait (outside the lock; the copy runs at
  // memory speed) until the receiver is done, dies, or takes unreasonably long. A failed
  // receiver in another process has died or reads only the shared arena, which stays mapped;
  // one in this process is a thread whose copy goes on after its mesh is aborted, straight
  // from this buffer, so it is waited for.
  std::atomic<uint32_t>* word;
  uint32_t reading;
  int peer_rank = request.peer();
  bool receiver_elsewhere;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (request.IsDone()) return;
    word = &peers_[peer_rank].out.slot_word(request.slot_);
    reading = SlotWord(SlotGeneration(request.slot_ref_), kSlotReading);
    receiver_elsewhere = !peers_[peer_rank].InThisProcess();
  }
  const Deadline give_up = Deadline::After(kCancelReadWait);
  while (word->load(std::memory_order_acquire) == reading && !give_up.Expired()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (request.IsDone() || (receiver_elsewhere && !peers_[peer_rank].failure.ok())) break;
    }
    absl::SleepFor(absl::Microseconds(200));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (request.IsDone()) return;
  if (word->load(std::memory_order_acquire) == reading &&
      (!receiver_elsewhere || peers_[peer_rank].failure.ok())) {
    CHORUS_LOG(kWarn, "shm") << "rank " << rank_ << ": cancelled " << Describe(request, {})
                             << " while rank " << peer_rank << " still reads its buffer after "
                             << absl::FormatDuration(kCancelReadWait) << "; giving up on it";
  }
  if (SlotStateOf(word->load(std::memory_order_acquire)) == kSlotDone) {
    Complete(request, absl::OkStatus(), request.size_);  // the receiver took it meanwhile
    return;
  }
  Complete(request,
           AbortedError(absl::StrCat("shm: ", Describe(request, {}), " was cancelled"), peer_rank));
}

void Engine::AwaitInPlaceReads(const Peer& peer) const {
  // A peer in another process reads only the shared arena, which stays mapped, or through the
  // kernel, which fails cleanly on memory that is gone; one in this process is a thread that
  // may be copying out of a send's buffer, which its owner frees once the send fails. Such a
  // copy runs at memory speed even after its reader's mesh is aborted.
  if (peer.InThisProcess()) peer.out.AwaitInPlaceReads(Deadline::After(kCancelReadWait));
}

void Engine::FailPeer(Peer& peer, absl::Status status, bool departed) {
  if (!peer.failure.ok()) return;
  if (departed) {
    CHORUS_LOG(kInfo, "shm") << "rank " << rank_ << ": " << status.message();
  } else {
    CHORUS_LOG(kWarn, "shm") << "rank " << rank_ << ": " << status.message();
  }
  peer.failure = status;
  peer.departed = departed;
  troubled_.store(true, std::memory_order_release);
  AwaitInPlaceReads(peer);
  for (const auto& [tag, request] : matching_.TakePosted(peer.rank)) {
    if (!request->any_peers_.empty()) {
      // A peer that left in good order does not fail a receive another peer may satisfy.
      if (AnyFailure(request->any_peers_).ok()) continue;
      Unpost(*request);
    }
    Complete(*request, status);
  }
  peer.out.FailAll([&](ShmRequest& request) { Complete(request, status); });
  peer.in.streams().FailAll([&](ShmRequest& request) { Complete(request, status); });
  // Messages that arrived in full stay receivable; descriptors and partial pulls of large ones
  // are useless without their sender.
  matching_.RetainUnexpected(peer.rank, [](const Matching::Arrived& arrived) {
    return arrived.message.kind == Unexpected::Kind::kData;
  });
}

absl::Status Engine::AnyFailure(absl::Span<const int> peers) const {
  // A peer that died or aborted fails the receive at once, so a survivor never waits out its
  // deadline on a dead rank; peers that destroyed their meshes fail it only once none is left.
  absl::Status last;
  for (int r : peers) {
    const Peer& peer = peers_[r];
    if (peer.failure.ok()) return absl::OkStatus();
    if (!peer.departed) return peer.failure;
    last = peer.failure;
  }
  return last;
}

void Engine::CloseWith(absl::Status status, uint32_t how) {
  if (!closed_.ok()) return;
  closed_ = status;
  troubled_.store(true, std::memory_order_release);
  // Withdraw announced buffers nobody reads yet, so no peer starts reading them later.
  for (Peer& peer : peers_) {
    peer.out.WithdrawAll();
    AwaitInPlaceReads(peer);
  }
  std::vector<std::shared_ptr<ShmRequest>> all;
  all.reserve(pending_.size());
  for (auto& [raw, request] : pending_) all.push_back(request);
  for (const std::shared_ptr<ShmRequest>& request : all) Complete(*request, status);
  matching_.Clear();
  for (Peer& peer : peers_) {
    peer.out.Clear();
    peer.in.streams().Clear();
  }
  held_.Clear();
  // Tell the peers: those attached to us see `closed` on their next poll; ring the ones we
  // reach so sleeping ones look now.
  ScanAttachments();
  header_.closed.store(how, std::memory_order_release);
  for (int r : active_) WakeAll(peers_[r].out.header());
  active_.clear();
}

void Engine::Abort(absl::string_view reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    CloseWith(AbortedError(absl::StrCat("shm: the mesh of rank ", rank_, " was aborted: ", reason)),
              kClosedAborted);
  }
  WakeAll(header_);
}

void Engine::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    CloseWith(AbortedError(absl::StrCat("shm: the mesh of rank ", rank_, " was destroyed")),
              kClosedDestroyed);
  }
  if (!stopping_.exchange(true)) {
    liveness_.Stop();
    WakeAll(header_);
    background_.join();
    inbox_->CloseForAttach();
  }
}

// ------------------------------------------------------------------------------------------
// Shared slots

absl::Status Engine::AttachAll() {
  if (slots_attached_.load(std::memory_order_acquire)) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  if (slots_attached_.load(std::memory_order_relaxed)) return absl::OkStatus();
  if (!closed_.ok()) return closed_;
  for (Peer& peer : peers_) {
    if (peer.rank == rank_) continue;
    Connect(peer);
    if (!peer.failure.ok()) return peer.failure;
    slot_bases_[peer.rank] = peer.out.shared_slots();
  }
  slots_attached_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status Engine::PeerStatus(int rank) {
  if (!troubled_.load(std::memory_order_acquire)) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_.ok()) return closed_;
  return peers_[rank].failure;
}

bool Engine::MessageWaiting(int rank, Tag tag) {
  PollOnce();  // what has arrived in the rings reaches the match table
  std::lock_guard<std::mutex> lock(mu_);
  return matching_.OldestUnexpected(rank, tag) != nullptr;
}

// ------------------------------------------------------------------------------------------
// Waiting and the background thread

void Engine::PollOnce() {
  if (mu_.try_lock()) {
    if (closed_.ok()) Progress();
    mu_.unlock();
  }
  waiters_.WakeIfCompleted();
}

absl::Status Engine::Wait(ShmRequest& request, Deadline deadline) {
  if (!request.IsDone()) {
    waiters_.Wait(
        deadline, [this] { PollOnce(); }, [&request] { return request.IsDone(); },
        [this] { return held_.UntilNextPull(); });
  }
  if (!request.IsDone()) {
    std::vector<int> any_peers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      any_peers = request.any_peers_;
    }
    return DeadlineExceededError(
        absl::StrCat("shm: ", Describe(request, any_peers),
                     " did not complete before its deadline on rank ", rank_),
        request.peer());
  }
  return request.status();
}

void Engine::BackgroundLoop() {
  SetThreadLogRank(rank_);
  while (!stopping_.load(std::memory_order_acquire)) {
    if (waiters_.active()) {
      // Waiters drive progress; only watch the peers' pids.
      CheckLiveness(kLivenessPollMillis);
      continue;
    }
    CheckLiveness(0);
    const uint32_t seq = BeginSleep(header_);
    PollOnce();
    if (!waiters_.active() && !stopping_.load(std::memory_order_acquire)) {
      Sleep(header_, seq, std::min(kIdleSleep, held_.UntilNextPull()));
    }
    EndSleep(header_);
  }
}

void Engine::CheckLiveness(int timeout_ms) {
  PeerLiveness::Look look = liveness_.Begin();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int r : active_) liveness_.Add(r, peers_[r].address.pid, &look);
  }
  const std::vector<int>& dead = look.Wait(timeout_ms);
  if (dead.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int r : dead) {
      Peer& peer = peers_[r];
      if (!peer.failure.ok() || !closed_.ok()) continue;
      // A peer that closed its mesh and then exited left in order: report that instead.
      const bool closed_first = peer.out.header().closed.load(std::memory_order_acquire) != kOpen;
      Drain(peer);  // what it wrote in full before dying is still delivered
      if (closed_first) {
        Progress();
        continue;
      }
      FailPeer(peer, PeerUnavailableError(
                         absl::StrCat("shm: rank ", r, " (pid ", peer.address.pid,
                                      ") died; requests to and from it fail. Check its logs "
                                      "for why; rebuild the communicator without it"),
                         r));
    }
  }
  waiters_.WakeIfCompleted();
}

}  // namespace chorus::shm
