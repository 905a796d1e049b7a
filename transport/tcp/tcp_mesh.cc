#include "chorus/transport/tcp/tcp_mesh.h"

#include <sys/random.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chorus/core/host_identity.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"

namespace chorus::tcp {

uint64_t RandomId() {
  uint64_t id = 0;
  while (id == 0) {
    if (getrandom(&id, sizeof(id), 0) != static_cast<ssize_t>(sizeof(id))) id = 0;
  }
  return id;
}

TcpMesh::TcpMesh(std::shared_ptr<DeviceState> context, int rank, int size,
                 const MeshOptions& options, uint64_t mesh_id)
    : context_(std::move(context)),
      rank_(rank),
      size_(size),
      options_(options),
      mesh_id_(mesh_id),
      connections_(size),
      matching_(size) {
  std::lock_guard<std::mutex> lock(engine().mu());
  context_->meshes[mesh_id_] = this;
  engine().AddTickable(this);
}

TcpMesh::~TcpMesh() {
  std::lock_guard<std::mutex> lock(engine().mu());
  if (aborted_.ok()) {
    aborted_ = AbortedError(absl::StrCat("the mesh of rank ", rank_, " was destroyed"));
  }
  for (auto& connection : connections_) {
    if (connection != nullptr) connection->Fail(aborted_);
  }
  connections_.clear();
  context_->meshes.erase(mesh_id_);
  engine().RemoveTickable(this);
}

std::string TcpMesh::PeerLabel(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) return absl::StrCat("rank ", peer);
  return absl::StrCat("rank ", peer, " (", peers_[peer].address.ToString(), ")");
}

void TcpMesh::SetPeers(uint64_t job_id, std::vector<PeerAddress> peers) {
  job_id_ = job_id;
  peers_ = std::move(peers);
  const SocketAddress& own = context_->listen_address;
  const auto on_this_host = std::count_if(
      peers_.begin(), peers_.end(), [&](const PeerAddress& p) { return SameHost(own, p.address); });
  host_oversubscribed_ = on_this_host > UsableCores();
  ready_ = true;
}

bool TcpMesh::SameHostLinkWithCores(int peer) const {
  return !host_oversubscribed_ && SameHost(context_->listen_address, peers_[peer].address);
}

bool TcpMesh::SameHostLinkOversubscribed(int peer) const {
  return host_oversubscribed_ && SameHost(context_->listen_address, peers_[peer].address);
}

TcpConnection* TcpMesh::ConnectionLocked(int peer) {
  std::unique_ptr<TcpConnection>& connection = connections_[peer];
  if (connection == nullptr) {
    connection =
        std::make_unique<TcpConnection>(*this, peer, Deadline::After(options_.connect_timeout));
    if (aborted_.ok()) {
      connection->StartDial();
    } else {
      connection->Fail(aborted_);
    }
  }
  return connection.get();
}

absl::StatusOr<Connection*> TcpMesh::GetConnection(int peer) {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return InvalidArgumentError(absl::StrCat("rank ", rank_, " asked for a connection to rank ",
                                             peer, ", which is not another rank of its mesh of ",
                                             size_));
  }
  auto lock = engine().LockForPosting();
  return ConnectionLocked(peer);
}

RequestPtr TcpMesh::RecvFromAny(absl::Span<const int> peers, Tag tag, MemoryRef buffer) {
  return RecvFromAnyPart(peers, tag, buffer, nullptr, 0);  // no claim: the whole receive
}

RequestPtr TcpMesh::RecvFromAnyPart(absl::Span<const int> peers, Tag tag, MemoryRef buffer,
                                    std::shared_ptr<ReceiveClaim> claim, int part) {
  auto request =
      std::make_shared<TcpRequest>(RequestKind::kRecv, -1, tag, engine_ptr(),
                                   std::make_shared<const std::string>(absl::StrCat(
                                       "any of ranks [", absl::StrJoin(peers, ", "), "]")));
  auto lock = engine().LockForPosting();
  const absl::Status checked =
      matching::CheckAnyReceive(peers, rank_, size_, buffer, aborted_, "the TCP transport");
  if (!checked.ok()) {
    request->Finish(checked, 0);
    return request;
  }
  RecvSlot receive;
  receive.request = request;
  receive.data = static_cast<uint8_t*>(buffer.data);
  receive.capacity = buffer.size;
  receive.claim = std::move(claim);
  receive.part = part;
  for (int peer : peers) ConnectionLocked(peer);
  // A message already here wins, the earliest arrival first.
  const int oldest = matching_.OldestUnexpectedAmong(peers, tag);
  if (oldest >= 0) {
    if (receive.WinClaim()) {
      // Owned first, as for TcpConnection::Recv: the message may still be arriving.
      request->set_owner(this);
      connections_[oldest]->TakeUnexpected(tag, receive);
    } else {
      request->Finish(WithdrawnPartError(rank_), 0);
    }
    return request;
  }
  if (receive.claim != nullptr && receive.claim->WonByAnother(part)) {
    request->Finish(WithdrawnPartError(rank_), 0);  // settled already: never posted
    return request;
  }
  for (int peer : peers) {
    const TcpConnection& connection = *connections_[peer];
    if (connection.failed()) {
      request->Finish(connection.failure(), 0, peer);
      return request;
    }
  }
  request->set_owner(this);
  matching_.PostOnEach(peers, tag, std::make_shared<RecvSlot>(std::move(receive)));
  return request;
}

void TcpMesh::CancelLocked(TcpRequest& request) {
  for (auto& connection : connections_) {
    if (connection != nullptr) connection->ForgetRecv(request);
  }
}

void TcpMesh::Abort(absl::string_view reason) {
  std::lock_guard<std::mutex> lock(engine().mu());
  if (!aborted_.ok()) return;
  aborted_ = AbortedError(absl::StrCat("the mesh of rank ", rank_, " was aborted: ", reason));
  CHORUS_LOG(kWarn, "tcp") << aborted_.message();
  for (auto& connection : connections_) {
    if (connection != nullptr) connection->Fail(aborted_);
  }
}

HandshakeVerdict TcpMesh::EvaluateHello(const Hello& hello) const {
  if (!aborted_.ok()) return HandshakeVerdict::kClosed;
  if (hello.job_id != job_id_) return HandshakeVerdict::kWrongJob;
  if (hello.target_rank != static_cast<uint32_t>(rank_)) return HandshakeVerdict::kWrongTargetRank;
  if (hello.source_rank >= static_cast<uint32_t>(size_) ||
      hello.source_rank == static_cast<uint32_t>(rank_)) {
    return HandshakeVerdict::kBadSourceRank;
  }
  if (hello.source_mesh_id != peers_[hello.source_rank].mesh_id) {
    return HandshakeVerdict::kUnknownMesh;
  }
  const TcpConnection* connection = connections_[hello.source_rank].get();
  if (connection == nullptr) {
    return hello.stream_index == 0 ? HandshakeVerdict::kAccepted : HandshakeVerdict::kBadStream;
  }
  return connection->EvaluateHello(hello);
}

void TcpMesh::AdoptStream(const Hello& hello, security::Channel channel) {
  std::unique_ptr<TcpConnection>& connection = connections_[hello.source_rank];
  if (connection == nullptr) {
    connection = std::make_unique<TcpConnection>(*this, static_cast<int>(hello.source_rank),
                                                 Deadline::After(options_.connect_timeout));
  }
  connection->AdoptStream(hello, std::move(channel));
}

absl::Duration TcpMesh::Tick() {
  bool pending = false;
  for (auto& connection : connections_) {
    if (connection != nullptr && connection->Tick()) pending = true;
  }
  return pending ? ProgressEngine::kTickInterval : absl::InfiniteDuration();
}

}  // namespace chorus::tcp
