// The bookkeeping of messages in flight on a connection: outgoing messages and the frames
// they are cut into, posted receives, and incoming messages. Plain structs; every field is
// guarded by the engine's mutex (progress_engine.h).
#ifndef CHORUS_TRANSPORT_TCP_MESSAGE_H_
#define CHORUS_TRANSPORT_TCP_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "chorus/transport/receive_claim.h"
#include "chorus/transport/tcp/buffer_pool.h"
#include "chorus/transport/tcp/tcp_request.h"
#include "chorus/transport/tcp/wire_format.h"
#include "chorus/transport/transport.h"

namespace chorus::tcp {

// A posted send.
struct OutboundMessage {
  // The send's request, which lives as long as the message: both are parts of one OutboundSend.
  TcpRequest* request = nullptr;
  Tag tag = 0;
  uint64_t seq = 0;
  const uint8_t* data = nullptr;  // the caller's buffer, or `copy` after a cancel
  uint64_t size = 0;
  int frames_left = 0;   // frames not yet fully written
  bool started = false;  // some byte of it is on the wire
  // After the caller cancels a send that is partly on the wire, the rest goes out from here
  // (the stream must stay in sync, and the caller's buffer is no longer ours to read).
  std::unique_ptr<uint8_t[]> copy;
};

// A send: its request and its message in one allocation. The caller holds the request and
// the streams' frames hold the message, each through a shared_ptr that aliases this whole.
struct OutboundSend {
  template <typename... RequestArgs>
  explicit OutboundSend(RequestArgs&&... args) : request(std::forward<RequestArgs>(args)...) {
    message.request = &request;
  }
  OutboundSend(const OutboundSend&) = delete;
  OutboundSend& operator=(const OutboundSend&) = delete;

  TcpRequest request;
  OutboundMessage message;
};

// One frame of an outbound message, queued on one stream.
struct OutFrame {
  std::shared_ptr<OutboundMessage> message;
  EncodedFrameHeader header{};
  size_t header_sent = 0;
  uint64_t offset = 0;  // of the payload within the message
  uint64_t length = 0;  // payload bytes
  uint64_t payload_sent = 0;
};

// A posted receive. A RecvFromAny receive is one slot posted on several peers.
struct RecvSlot {
  std::shared_ptr<TcpRequest> request;
  uint8_t* data = nullptr;
  size_t capacity = 0;
  // Connection::RecvWithSink: the message goes to this sink instead of `data` when it is
  // matched as it is announced, or from its buffer when it arrived whole before the receive.
  RecvSink* sink = nullptr;
  // Mesh::RecvFromAnyPart: the claim shared with the receive's parts on other meshes.
  std::shared_ptr<ReceiveClaim> claim;
  int part = 0;

  // True once this receive may take a message: always, unless another part won its claim.
  bool WinClaim() const { return claim == nullptr || claim->TryClaim(part); }
};

// A message announced by a kStart frame.
struct InboundMessage {
  uint64_t seq = 0;
  Tag tag = 0;
  uint64_t size = 0;
  uint64_t received = 0;
  bool complete = false;
  // Where the payload goes: the matched receive's buffer (zero copy), or `buffered` when it
  // arrived before its receive (then copied), or nowhere (`discard`: too long for its
  // receive, or its receive was cancelled).
  std::shared_ptr<RecvSlot> slot;
  PooledBuffer buffered;
  bool discard = false;
  // Matched on arrival to a receive with a sink (RecvSlot::sink): the stream hands the
  // payload to the sink from a buffer of its own, and the receive's buffer is never written.
  bool to_sink = false;
  // (offset, bytes written so far) of each frame of the message that has started arriving:
  // what to copy out of `buffered` when a receive takes the message while it still arrives
  // (the rest then goes straight to the receive's buffer). At most one entry per stream; one,
  // held inline, for every message below the striping size.
  absl::InlinedVector<std::pair<uint64_t, uint64_t>, 1> frames;

  // Where payload byte 0 goes now; nullptr to discard.
  uint8_t* destination() const {
    if (discard) return nullptr;
    if (buffered) return buffered.get();
    return slot ? slot->data : nullptr;
  }

  // The sink the payload goes to (see `to_sink`); null when it goes to a buffer or nowhere.
  RecvSink* sink() const { return to_sink && !discard && slot != nullptr ? slot->sink : nullptr; }
};

}  // namespace chorus::tcp

#endif  // CHORUS_TRANSPORT_TCP_MESSAGE_H_
