// One communicator's view of its peers over a TCP device: the peers' published addresses from the
// bootstrap exchange, lazily created connections, RecvFromAny and Abort.
#ifndef CHORUS_TRANSPORT_TCP_TCP_MESH_H_
#define CHORUS_TRANSPORT_TCP_TCP_MESH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "chorus/core/socket.h"
#include "chorus/transport/matching/match_table.h"
#include "chorus/transport/tcp/device_state.h"
#include "chorus/transport/tcp/handshake.h"
#include "chorus/transport/tcp/progress_engine.h"
#include "chorus/transport/tcp/tcp_connection.h"
#include "chorus/transport/tcp/tcp_request.h"
#include "chorus/transport/transport.h"

namespace chorus::tcp {

// A peer as the bootstrap exchange described it.
struct PeerAddress {
  SocketAddress address;
  uint64_t mesh_id = 0;
};

// Thread-safe: the Mesh methods take the engine's mutex; the others require it.
class TcpMesh : public Mesh, public Tickable, public RequestOwner {
 public:
  // Registers the mesh under `mesh_id` with the device's context (so handshakes naming it
  // wait for it instead of being refused) and with the engine's timers.
  TcpMesh(std::shared_ptr<DeviceState> context, int rank, int size, const MeshOptions& options,
          uint64_t mesh_id);
  // Fails every pending request with kAborted, closes every socket and unregisters.
  ~TcpMesh() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::StatusOr<Connection*> GetConnection(int peer) override;
  RequestPtr RecvFromAny(absl::Span<const int> peers, Tag tag, MemoryRef buffer) override;
  RequestPtr RecvFromAnyPart(absl::Span<const int> peers, Tag tag, MemoryRef buffer,
                             std::shared_ptr<ReceiveClaim> claim, int part) override;
  void Abort(absl::string_view reason) override;

  // --- With the engine's mutex held ---
  // Completes the bootstrap: every rank's address (index = rank). Handshakes are answered
  // from then on.
  void SetPeers(uint64_t job_id, std::vector<PeerAddress> peers);
  bool ready() const { return ready_; }
  HandshakeVerdict EvaluateHello(const Hello& hello) const;
  void AdoptStream(const Hello& hello, security::Channel channel);
  absl::Duration Tick() override;
  void CancelLocked(TcpRequest& request) override;  // a RecvFromAny receive

  // --- For its connections ---
  ProgressEngine& engine() const { return *context_->engine; }
  const std::shared_ptr<ProgressEngine>& engine_ptr() const { return context_->engine; }
  const TcpDeviceOptions& device_options() const { return context_->options; }
  BufferPool& unexpected_buffers() const { return *context_->unexpected_buffers; }
  uint64_t job_id() const { return job_id_; }
  uint64_t mesh_id() const { return mesh_id_; }
  const PeerAddress& peer_address(int peer) const { return peers_[peer]; }
  // Whether the link to `peer` joins two ranks of this host while this host's ranks of the
  // mesh have a core each: the links `auto` gives a loss-based congestion control
  // (congestion.h).
  bool SameHostLinkWithCores(int peer) const;
  // Whether it joins two ranks of this host while this host's ranks of the mesh outnumber its
  // cores: the links whose sockets `auto` switches by message size (SizeSwitchedCongestion).
  bool SameHostLinkOversubscribed(int peer) const;
  // OK, or the kAborted status every request fails with after Abort().
  const absl::Status& aborted() const { return aborted_; }
  // Posted receives and messages that arrived first, per peer.
  using Matching = matching::MatchTable<std::shared_ptr<RecvSlot>, std::shared_ptr<InboundMessage>>;
  Matching& matching() { return matching_; }
  std::string PeerLabel(int peer) const;

 private:
  TcpConnection* ConnectionLocked(int peer);

  const std::shared_ptr<DeviceState> context_;
  const int rank_;
  const int size_;
  const MeshOptions options_;
  const uint64_t mesh_id_;

  // Guarded by the engine's mutex.
  bool ready_ = false;
  uint64_t job_id_ = 0;
  std::vector<PeerAddress> peers_;
  bool host_oversubscribed_ = false;  // this host's ranks of the mesh outnumber its cores
  std::vector<std::unique_ptr<TcpConnection>> connections_;
  absl::Status aborted_;
  Matching matching_;
};

}  // namespace chorus::tcp

#endif  // CHORUS_TRANSPORT_TCP_TCP_MESH_H_
