#include "chorus/transport/ibverbs/verbs_mesh.h"

#include <unistd.h>

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "chorus/core/host_identity.h"
#include "chorus/core/status.h"

namespace chorus::ibverbs {
namespace {

uint32_t RandomPsn() {
  std::random_device random;
  return random() & 0xffffff;
}

}  // namespace

VerbsMesh::VerbsMesh(std::shared_ptr<VerbsEngine> engine, int rank, int size, uint64_t mesh_id)
    : engine_(std::move(engine)),
      rank_(rank),
      size_(size),
      mesh_id_(mesh_id),
      psn_(RandomPsn()),
      matching_(size) {}

VerbsMesh::~VerbsMesh() {
  {
    std::unique_lock<std::mutex> lock(engine_->mu());
    if (aborted_.ok()) aborted_ = AbortedError("the mesh was destroyed");
    for (auto& connection : connections_) {
      if (connection == nullptr) continue;
      connection->Fail(aborted_);
      if (connection->qp_num() != 0) engine_->Detach(connection->qp_num());
    }
    // A cancel on another thread may be waiting on a connection with the mutex released: the
    // failure ends its wait, and the connections live until it has left.
    engine_->reads_done().notify_all();
    while (cancels_waiting_ > 0) engine_->reads_done().wait_for(lock, std::chrono::milliseconds(5));
  }
  connections_.clear();
}

absl::StatusOr<PublishedAddress> VerbsMesh::Prepare() {
  const VerbsContext& context = engine_->context();
  PublishedAddress address;
  address.gid = context.gid();
  address.lid = context.lid();
  address.link_layer = context.link_layer();
  address.mtu_bytes = static_cast<uint32_t>(context.mtu_bytes());
  address.psn = psn_;
  address.mesh_id = mesh_id_;
  address.slots = static_cast<uint32_t>(engine_->options().slots);
  address.slot_bytes = static_cast<uint32_t>(engine_->options().slot_bytes);
  address.read_depth = ResponderReadDepth(context);
  address.device = absl::StrCat(context.name(), " port ", context.port());
  address.host = LocalHostIdentity();
  address.pid = static_cast<uint32_t>(getpid());
  address.endpoints.resize(size_);
  connections_.resize(size_);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    uint32_t serial;
    {
      std::lock_guard<std::mutex> lock(engine_->mu());
      serial = engine_->NextSerial();
    }
    auto connection = std::make_unique<VerbsConnection>(*this, peer, serial);
    CHORUS_RETURN_IF_ERROR(connection->Create());
    address.endpoints[peer] = connection->LocalEndpoint();
    connections_[peer] = std::move(connection);
  }
  return address;
}

absl::Status VerbsMesh::Connect(const std::vector<PublishedAddress>& peers) {
  const PublishedAddress& own = peers[rank_];
  for (int peer = 0; peer < size_; ++peer) {
    const PublishedAddress& address = peers[peer];
    if (static_cast<int>(address.endpoints.size()) != size_) {
      return MismatchError(absl::StrCat("ibverbs: rank ", peer, " published queue pairs for ",
                                        address.endpoints.size(), " ranks, this mesh has ", size_),
                           peer);
    }
    if (address.slots != own.slots || address.slot_bytes != own.slot_bytes) {
      return MismatchError(absl::StrCat("ibverbs: rank ", peer, " uses ", address.slots,
                                        " eager slots of ", address.slot_bytes, " bytes, rank ",
                                        rank_, " ", own.slots, " of ", own.slot_bytes,
                                        "; set CHORUS_IB_SLOTS and CHORUS_IB_EAGER_BYTES alike "
                                        "on every rank"),
                           peer);
    }
    if (address.link_layer != own.link_layer) {
      return MismatchError(absl::StrCat("ibverbs: rank ", peer, " (", address.device,
                                        ") is on another link layer than rank ", rank_, " (",
                                        own.device, "): InfiniBand and RoCE do not connect"),
                           peer);
    }
  }
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) CHORUS_RETURN_IF_ERROR(connections_[peer]->BringUp(peers[peer], psn_));
  }
  std::lock_guard<std::mutex> lock(engine_->mu());
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) connections_[peer]->Attach();
  }
  return absl::OkStatus();
}

absl::Status VerbsMesh::Start() {
  std::lock_guard<std::mutex> lock(engine_->mu());
  absl::Status first_failure;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    const absl::Status started = connections_[peer]->Start();
    if (first_failure.ok()) first_failure = started;
  }
  return first_failure;
}

absl::StatusOr<Connection*> VerbsMesh::GetConnection(int peer) {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return InvalidArgumentError(
        absl::StrCat("rank ", rank_, " of ", size_, " has no connection to rank ", peer));
  }
  return connections_[peer].get();
}

RequestPtr VerbsMesh::RecvFromAny(absl::Span<const int> peers, Tag tag, MemoryRef buffer) {
  return RecvFromAnyPart(peers, tag, buffer, nullptr, 0);
}

RequestPtr VerbsMesh::RecvFromAnyPart(absl::Span<const int> peers, Tag tag, MemoryRef buffer,
                                      std::shared_ptr<ReceiveClaim> claim, int part) {
  auto request = std::make_shared<VerbsRequest>(RequestKind::kRecv, -1, tag, engine_);
  std::lock_guard<std::mutex> lock(engine_->mu());
  const absl::Status checked =
      matching::CheckAnyReceive(peers, rank_, size_, buffer, aborted_, "the verbs transport");
  if (!checked.ok()) {
    request->Complete(checked, 0);
    return request;
  }
  auto slot = std::make_shared<RecvSlot>();
  slot->request = request;
  slot->data = static_cast<uint8_t*>(buffer.data);
  slot->capacity = buffer.size;
  slot->claim = std::move(claim);
  slot->part = part;
  slot->peers.assign(peers.begin(), peers.end());
  request->recv_slot = slot;
  request->set_target(this);
  // A message already here wins, the earliest arrival first.
  const int oldest = matching_.OldestUnexpectedAmong(peers, tag);
  if (oldest >= 0) {
    if (slot->WinClaim()) {
      connections_[oldest]->TakeUnexpected(tag, slot);
    } else {
      request->Complete(WithdrawnPartError(rank_), 0);
    }
    return request;
  }
  if (slot->claim != nullptr && slot->claim->WonByAnother(part)) {
    request->Complete(WithdrawnPartError(rank_), 0);
    return request;
  }
  for (int peer : peers) {
    if (connections_[peer]->failed()) {
      request->Complete(connections_[peer]->failure(), 0, peer);
      return request;
    }
  }
  matching_.PostOnEach(peers, tag, slot);
  return request;
}

void VerbsMesh::CancelLocked(VerbsRequest& request, std::unique_lock<std::mutex>& lock) {
  std::shared_ptr<RecvSlot> slot = request.recv_slot.lock();
  if (slot == nullptr) return;
  if (slot->inbound != nullptr && slot->matched_on != nullptr) {
    slot->matched_on->CancelMatchedRecv(*slot, lock);
    return;
  }
  matching_.Unpost(slot->peers.front(), request.tag(), *slot);
  request.Complete(AbortedError("cancelled receive from any of several ranks"), 0);
}

void VerbsMesh::Abort(absl::string_view reason) {
  std::lock_guard<std::mutex> lock(engine_->mu());
  if (!aborted_.ok()) return;
  aborted_ = AbortedError(absl::StrCat("ibverbs mesh aborted: ", reason));
  for (auto& connection : connections_) {
    if (connection != nullptr) connection->Fail(aborted_);
  }
}

}  // namespace chorus::ibverbs
