// A TCP connection to one peer of a mesh: sets itself up (dialing with retries, or adopting
// the peer's dial), cuts sends into frames over its streams, and matches arriving messages to
// posted receives through the mesh's match table.
#ifndef CHORUS_TRANSPORT_TCP_TCP_CONNECTION_H_
#define CHORUS_TRANSPORT_TCP_TCP_CONNECTION_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "chorus/core/deadline.h"
#include "chorus/transport/tcp/handshake.h"
#include "chorus/transport/tcp/message.h"
#include "chorus/transport/tcp/stream.h"
#include "chorus/transport/tcp/tcp_request.h"
#include "chorus/transport/transport.h"

namespace chorus::tcp {

class TcpMesh;

// Thread-safe: Send and Recv take the engine's mutex; every other method requires it (the
// mesh and the streams call them from under it).
class TcpConnection : public Connection, public StreamOwner, public RequestOwner {
 public:
  // The mesh then either starts a dial (StartDial) or adopts the peer's (AdoptStream).
  TcpConnection(TcpMesh& mesh, int peer, Deadline connect_deadline);
  ~TcpConnection() override;

  int peer() const override { return peer_; }
  RequestPtr Send(Tag tag, ConstMemoryRef buffer) override;
  RequestPtr Recv(Tag tag, MemoryRef buffer) override;
  // Hands the payload to the sink a socket read at a time, from a small buffer of the stream,
  // so that the consumer reads it while it is still in the cache; `buffer` is written only
  // when the message was already arriving as the receive was posted.
  RequestPtr RecvWithSink(Tag tag, MemoryRef buffer, RecvSink* sink) override;

  // --- Setup, for the mesh ---
  void StartDial();
  // Whether a Hello from this peer is acceptable now (the mesh checked job, mesh and ranks).
  HandshakeVerdict EvaluateHello(const Hello& hello) const;
  void AdoptStream(const Hello& hello, security::Channel channel);
  // Timers: dial retries, handshake and connect deadlines. True while it needs more ticks.
  bool Tick();
  // Fails every pending request with `status` and closes the sockets; later requests fail
  // with it too. Messages that arrived whole before stay receivable.
  void Fail(const absl::Status& status);
  bool failed() const { return state_ == State::kFailed; }
  const absl::Status& failure() const { return failure_; }

  // --- Receives, also those posted on several peers (Mesh::RecvFromAny) ---
  // Gives the oldest message from this peer with `tag` that arrived before its receive to
  // `receive`; false if there is none (and `receive` is left as it was). A message still
  // arriving takes `receive` over into a slot on the heap; one that arrived whole needs none.
  bool TakeUnexpected(Tag tag, RecvSlot& receive);
  // Forgets a cancelled receive: unposts it, or discards the message it was receiving.
  void ForgetRecv(const TcpRequest& request);

  // StreamOwner.
  void OnDialResult(Stream& stream, absl::StatusOr<HandshakeVerdict> result) override;
  void OnDialRefused(Stream& stream, absl::string_view why) override;
  FrameTarget OnFrameHeader(Stream& stream, const FrameHeader& header) override;
  void OnMessageComplete(const std::shared_ptr<InboundMessage>& message) override;
  void OnStreamFailed(Stream& stream, absl::string_view why, bool tampered) override;
  void OnStreamEof(Stream& stream, bool mid_frame) override;
  // RequestOwner.
  void CancelLocked(TcpRequest& request) override;

 private:
  enum class State {
    kConnecting,        // dialing, or waiting to retry a dial
    kAwaitingPeerDial,  // our dial lost a simultaneous dial; the peer's dial will come
    kUp,
    kFailed,
  };

  void DialAttemptFailed(absl::string_view why);
  void DialExtraStreams();
  // Starts a connect to `address` and wraps it for the device's TLS, if any.
  absl::StatusOr<security::Channel> OpenChannel(const SocketAddress& address) const;
  void BecomeUp();
  // Recv and RecvWithSink (`sink` may be null).
  RequestPtr PostRecv(Tag tag, MemoryRef buffer, RecvSink* sink);
  void AssignFrames(const std::shared_ptr<OutboundMessage>& message);
  void CancelSend(const TcpRequest& request);
  std::shared_ptr<RecvSlot> PopPosted(Tag tag);
  // Gives an announced message to a receive: straight into its buffer, or copied once whole.
  void Match(const std::shared_ptr<InboundMessage>& message, const std::shared_ptr<RecvSlot>& slot);
  // False, with the receive failed and the message discarded, when the message is longer than
  // the receive's buffer.
  bool FitsReceive(InboundMessage& message, const RecvSlot& slot);
  // Completes the receive matched to a message that arrived whole (`message.slot`, or `slot`).
  void Deliver(InboundMessage& message);
  void DeliverTo(InboundMessage& message, const RecvSlot& slot);
  void ResumeStreamsPausedOn(uint64_t seq);
  FrameTarget ProtocolError(absl::string_view why);
  void RetireStream(std::unique_ptr<Stream> stream);
  // A stream just dialed or accepted, set up for this link's congestion control.
  std::unique_ptr<Stream> Adopted(std::unique_ptr<Stream> stream) const;
  // After the peer closed stream 0: fails the connection once nothing more can arrive.
  void FailIfPeerGone();
  absl::Status PeerClosedError() const;
  size_t PendingCount() const;

  TcpMesh& mesh_;
  ProgressEngine& engine_;
  const int peer_;
  // "rank 3 (10.0.0.4:5000)"; shared with the connection's requests, which name the peer in
  // their errors, so that posting one copies no string.
  const std::shared_ptr<const std::string> label_;
  const Deadline connect_deadline_;
  // Its streams' congestion control follows each message's size (congestion.h).
  const bool congestion_by_size_;

  State state_ = State::kConnecting;
  absl::Status failure_;

  // Dialing.
  std::unique_ptr<Stream> dial_stream_;  // stream 0 while its dial is under way
  Deadline next_dial_ = Deadline::Infinite();
  absl::Duration dial_backoff_ = absl::Milliseconds(10);
  int dial_attempts_ = 0;
  std::string last_dial_error_;
  uint64_t dial_id_ = 0;  // of the dial that made the connection
  bool dialed_by_us_ = false;

  // streams_[i] is stream i (null until it is dialed or accepted); stream 0 carries every
  // kStart frame.
  std::vector<std::unique_ptr<Stream>> streams_;

  // Sending.
  uint64_t next_send_seq_ = 1;
  std::deque<std::shared_ptr<OutboundMessage>> unassigned_sends_;  // posted before kUp

  // Receiving.
  // The peer closed stream 0 (at a frame boundary): no new message can be announced, but
  // chunks of announced ones may still be arriving on the other streams.
  bool peer_closed_ = false;
  uint64_t last_announced_seq_ = 0;
  // Announced, not whole; a hash map, whose nodes are not allocated one message at a time.
  absl::flat_hash_map<uint64_t, std::shared_ptr<InboundMessage>> inbound_;
  // Posted receives and messages that arrived first live in the mesh's match table.
};

}  // namespace chorus::tcp

#endif  // CHORUS_TRANSPORT_TCP_TCP_CONNECTION_H_
