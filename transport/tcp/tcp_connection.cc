#include "chorus/transport/tcp/tcp_connection.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"
#include "chorus/transport/tcp/congestion.h"
#include "chorus/transport/tcp/tcp_mesh.h"

namespace chorus::tcp {
namespace {

constexpr absl::Duration kMaxDialBackoff = absl::Seconds(1);
// Stripes are cut at multiples of this, so each stream's part starts page-aligned.
constexpr uint64_t kStripeAlignment = 4096;

std::string TagText(Tag tag) { return absl::StrCat("tag ", absl::Hex(tag)); }

}  // namespace

TcpConnection::TcpConnection(TcpMesh& mesh, int peer, Deadline connect_deadline)
    : mesh_(mesh),
      engine_(mesh.engine()),
      peer_(peer),
      label_(std::make_shared<const std::string>(mesh.PeerLabel(peer))),
      connect_deadline_(connect_deadline),
      congestion_by_size_(SwitchesCongestionBySize(mesh.device_options().congestion,
                                                   mesh.SameHostLinkOversubscribed(peer))) {}

TcpConnection::~TcpConnection() {
  if (dial_stream_ != nullptr) dial_stream_->Close();
  for (auto& stream : streams_) {
    if (stream != nullptr) stream->Close();
  }
}

// --- Posting -----------------------------------------------------------------------------

RequestPtr TcpConnection::Send(Tag tag, ConstMemoryRef buffer) {
  auto send =
      std::make_shared<OutboundSend>(RequestKind::kSend, peer_, tag, mesh_.engine_ptr(), label_);
  std::shared_ptr<TcpRequest> request(send, &send->request);
  auto lock = engine_.LockForPosting();
  const uint64_t max_bytes = static_cast<uint64_t>(mesh_.device_options().max_message_bytes);
  if (buffer.type != MemoryType::kHost) {
    request->Finish(InvalidArgumentError("the TCP transport sends host memory only"), 0);
  } else if (buffer.size > max_bytes) {
    request->Finish(
        InvalidArgumentError(absl::StrCat("send of ", buffer.size, " bytes to ", *label_,
                                          " exceeds the maximum "
                                          "message size of ",
                                          max_bytes, " bytes (CHORUS_TCP_MAX_MESSAGE)")),
        0);
  } else if (!mesh_.aborted().ok()) {
    request->Finish(mesh_.aborted(), 0);
  } else if (state_ == State::kFailed) {
    request->Finish(failure_, 0);
  } else if (peer_closed_) {
    request->Finish(PeerClosedError(), 0);
  } else {
    std::shared_ptr<OutboundMessage> message(send, &send->message);
    message->tag = tag;
    message->seq = next_send_seq_++;
    message->data = static_cast<const uint8_t*>(buffer.data);
    message->size = buffer.size;
    request->set_owner(this);
    if (state_ == State::kUp) {
      AssignFrames(message);
    } else {
      unassigned_sends_.push_back(std::move(message));
    }
  }
  return request;
}

RequestPtr TcpConnection::Recv(Tag tag, MemoryRef buffer) { return PostRecv(tag, buffer, nullptr); }

RequestPtr TcpConnection::RecvWithSink(Tag tag, MemoryRef buffer, RecvSink* sink) {
  return PostRecv(tag, buffer, sink);
}

RequestPtr TcpConnection::PostRecv(Tag tag, MemoryRef buffer, RecvSink* sink) {
  auto request =
      std::make_shared<TcpRequest>(RequestKind::kRecv, peer_, tag, mesh_.engine_ptr(), label_);
  auto lock = engine_.LockForPosting();
  if (buffer.type != MemoryType::kHost) {
    request->Finish(InvalidArgumentError("the TCP transport receives into host memory only"), 0);
    return request;
  }
  if (!mesh_.aborted().ok()) {
    request->Finish(mesh_.aborted(), 0);
    return request;
  }
  RecvSlot receive;
  receive.request = request;
  receive.data = static_cast<uint8_t*>(buffer.data);
  receive.capacity = buffer.size;
  // A message matched as it is announced is received straight into the buffer; a sink that
  // would only copy it there again is left out.
  receive.sink = sink != nullptr && !sink->CopiesOnly() ? sink : nullptr;
  // Owned before it may match a message still arriving, whose rest the driver then writes into
  // the buffer: a Cancel must find it there (ForgetRecv) and have the rest dropped.
  request->set_owner(this);
  if (TakeUnexpected(tag, receive)) return request;
  if (state_ == State::kFailed) {
    request->Finish(failure_, 0);
    return request;
  }
  // A message that cannot be striped arrives on the first stream alone, which the receive's
  // waiter then reads between polls of the whole engine (TcpRequest::Wait). One that can also
  // comes on the other streams, which only the engine's polls read.
  const bool unstriped =
      streams_.size() == 1 ||
      buffer.size < static_cast<uint64_t>(mesh_.device_options().stripe_min_bytes);
  if (unstriped && !streams_.empty() && streams_[0] != nullptr && streams_[0]->open()) {
    request->set_read_hint(streams_[0]->token());
  }
  mesh_.matching().Post(peer_, tag, std::make_shared<RecvSlot>(std::move(receive)));
  return request;
}

void TcpConnection::AssignFrames(const std::shared_ptr<OutboundMessage>& message) {
  absl::InlinedVector<Stream*, 8> open;
  for (const auto& stream : streams_) {
    if (stream != nullptr && stream->open()) open.push_back(stream.get());
  }
  const bool stripe =
      open.size() > 1 &&
      message->size >= static_cast<uint64_t>(mesh_.device_options().stripe_min_bytes);
  const uint64_t parts = stripe ? open.size() : 1;
  uint64_t part_size = (message->size + parts - 1) / parts;
  part_size = (part_size + kStripeAlignment - 1) / kStripeAlignment * kStripeAlignment;
  uint64_t offset = 0;
  size_t used = 0;
  do {
    FrameHeader header;
    header.kind = used == 0 ? FrameKind::kStart : FrameKind::kChunk;
    header.seq = message->seq;
    header.tag = used == 0 ? message->tag : 0;
    header.total_length = message->size;
    header.offset = offset;
    header.length = parts == 1 ? message->size : std::min(part_size, message->size - offset);
    OutFrame frame;
    frame.message = message;
    frame.header = EncodeFrameHeader(header);
    frame.offset = offset;
    frame.length = header.length;
    open[used++]->Enqueue(std::move(frame));
    offset += header.length;
  } while (offset < message->size && used < open.size());
  message->frames_left = static_cast<int>(used);
  // Stream 0 first: its kStart frame announces the message to the receiver. One write each:
  // small messages leave now, large ones continue in the driver, so Send returns promptly.
  for (size_t i = 0; i < used && state_ == State::kUp; ++i) open[i]->Flush(Stream::kSingleWrite);
}

// --- Receiving ---------------------------------------------------------------------------

bool TcpConnection::TakeUnexpected(Tag tag, RecvSlot& receive) {
  std::optional<std::shared_ptr<InboundMessage>> message =
      mesh_.matching().PopUnexpected(peer_, tag);
  if (!message.has_value()) return false;
  // A message that arrived whole is delivered from `receive` itself, with no slot on the heap:
  // the call that finds its peer ahead costs what the one that waits does.
  if ((*message)->complete) {
    if (FitsReceive(**message, receive)) DeliverTo(**message, receive);
  } else {
    Match(*message, std::make_shared<RecvSlot>(std::move(receive)));
  }
  return true;
}

std::shared_ptr<RecvSlot> TcpConnection::PopPosted(Tag tag) {
  while (std::optional<std::shared_ptr<RecvSlot>> slot = mesh_.matching().PopPosted(peer_, tag)) {
    if ((*slot)->WinClaim()) return *slot;
    (*slot)->request->Finish(WithdrawnPartError(mesh_.rank()), 0);
  }
  return nullptr;
}

bool TcpConnection::FitsReceive(InboundMessage& message, const RecvSlot& slot) {
  if (message.size <= slot.capacity) return true;
  slot.request->Finish(InvalidArgumentError(absl::StrCat(
                           "message of ", message.size, " bytes from ", *label_, " (",
                           TagText(message.tag), ") is longer than the receive buffer of ",
                           slot.capacity, " bytes; the message was discarded")),
                       0, peer_);
  message.discard = true;
  message.buffered.reset();
  return false;
}

void TcpConnection::Match(const std::shared_ptr<InboundMessage>& message,
                          const std::shared_ptr<RecvSlot>& slot) {
  if (!FitsReceive(*message, *slot)) return;
  if (message->complete) {
    DeliverTo(*message, *slot);
    return;
  }
  message->slot = slot;
  if (message->buffered != nullptr) {
    // Still arriving: what is here is copied now, the rest lands in the receive's buffer.
    // (A sink gets nothing then: the rest of the message must land in the buffer too.)
    for (const auto& [offset, written] : message->frames) {
      std::memcpy(slot->data + offset, message->buffered.get() + offset, written);
    }
    message->buffered.reset();
  } else {
    message->to_sink = slot->sink != nullptr;
  }
}

void TcpConnection::Deliver(InboundMessage& message) {
  std::shared_ptr<RecvSlot> slot = std::move(message.slot);
  DeliverTo(message, *slot);
}

void TcpConnection::DeliverTo(InboundMessage& message, const RecvSlot& slot) {
  if (message.buffered != nullptr && message.size > 0) {
    // Buffered whole before its receive: a sink reads it from there, sparing the copy.
    if (slot.sink != nullptr) {
      slot.sink->Consume(0, message.buffered.get(), message.size);
    } else {
      std::memcpy(slot.data, message.buffered.get(), message.size);
    }
  }
  message.buffered.reset();
  slot.request->Finish(absl::OkStatus(), message.size, peer_);
}

FrameTarget TcpConnection::ProtocolError(absl::string_view why) {
  CHORUS_LOG(kWarn, "tcp") << *label_ << " violated the wire protocol: " << why
                           << "; closing the connection";
  Fail(PeerUnavailableError(
      absl::StrCat(*label_, " sent a malformed frame (", why,
                   "); the connection was closed. Are both sides the same Chorus version?"),
      peer_));
  return {FrameTarget::Action::kStop, nullptr};
}

FrameTarget TcpConnection::OnFrameHeader(Stream& stream, const FrameHeader& header) {
  if (header.kind == FrameKind::kChunk) {
    const auto it = inbound_.find(header.seq);
    if (it == inbound_.end()) {
      // Its kStart frame is still on its way on stream 0.
      if (header.seq > last_announced_seq_) return {FrameTarget::Action::kPause, nullptr};
      return ProtocolError(absl::StrCat("chunk of message ", header.seq, " which is not arriving"));
    }
    const std::shared_ptr<InboundMessage>& message = it->second;
    if (header.total_length != message->size || header.length > message->size - message->received) {
      return ProtocolError(
          absl::StrCat("chunk of ", header.length, " bytes does not fit message ", header.seq));
    }
    return {FrameTarget::Action::kDeliver, message};
  }
  if (stream.index() != 0) {
    return ProtocolError(absl::StrCat("start frame on stream ", stream.index()));
  }
  if (header.seq <= last_announced_seq_) {
    return ProtocolError(
        absl::StrCat("message number ", header.seq, " after ", last_announced_seq_));
  }
  last_announced_seq_ = header.seq;
  auto message = std::make_shared<InboundMessage>();
  message->seq = header.seq;
  message->tag = header.tag;
  message->size = header.total_length;
  if (std::shared_ptr<RecvSlot> slot = PopPosted(header.tag)) {
    Match(message, slot);
  } else {
    if (message->size > 0) {
      // The decoder capped the size at CHORUS_TCP_MAX_MESSAGE before we got here.
      message->buffered = mesh_.unexpected_buffers().Take(message->size);
      if (message->buffered == nullptr) {
        return ProtocolError(
            absl::StrCat("no memory to buffer an unexpected message of ", message->size, " bytes"));
      }
    }
    mesh_.matching().AddUnexpected(peer_, header.tag, message);
  }
  if (message->size == 0) {
    OnMessageComplete(message);
    return {FrameTarget::Action::kDeliver, nullptr};
  }
  inbound_[header.seq] = message;
  ResumeStreamsPausedOn(header.seq);
  return {FrameTarget::Action::kDeliver, message};
}

void TcpConnection::ResumeStreamsPausedOn(uint64_t seq) {
  for (size_t i = 1; i < streams_.size() && state_ == State::kUp; ++i) {
    Stream* stream = streams_[i].get();
    if (stream != nullptr && stream->paused() && stream->paused_seq() == seq) stream->Resume();
  }
}

void TcpConnection::OnMessageComplete(const std::shared_ptr<InboundMessage>& message) {
  message->complete = true;
  inbound_.erase(message->seq);
  if (!message->discard && message->slot != nullptr) Deliver(*message);
  // Otherwise a buffered message waits in the match table for its receive.
  FailIfPeerGone();
}

// --- Cancel ------------------------------------------------------------------------------

void TcpConnection::CancelLocked(TcpRequest& request) {
  if (request.kind() == RequestKind::kRecv) {
    ForgetRecv(request);
  } else {
    CancelSend(request);
  }
}

void TcpConnection::ForgetRecv(const TcpRequest& request) {
  TcpMesh::Matching& matching = mesh_.matching();
  const std::shared_ptr<RecvSlot>* posted = matching.FindPosted(
      peer_, request.tag(), [&](const auto& slot) { return slot->request.get() == &request; });
  if (posted != nullptr) {
    const std::shared_ptr<RecvSlot> slot = *posted;  // Unpost drops the table's reference
    matching.Unpost(peer_, request.tag(), *slot);
    return;
  }
  for (auto& [seq, message] : inbound_) {
    if (message->slot != nullptr && message->slot->request.get() == &request) {
      // The rest of the message is read from the socket and dropped.
      message->slot.reset();
      message->buffered.reset();
      message->discard = true;
      return;
    }
  }
}

void TcpConnection::CancelSend(const TcpRequest& request) {
  for (auto it = unassigned_sends_.begin(); it != unassigned_sends_.end(); ++it) {
    if ((*it)->request == &request) {
      unassigned_sends_.erase(it);
      return;
    }
  }
  std::shared_ptr<OutboundMessage> message;
  for (const auto& stream : streams_) {
    if (stream == nullptr) continue;
    for (const OutFrame& frame : stream->send_queue()) {
      if (frame.message->request == &request) message = frame.message;
    }
  }
  if (message == nullptr) return;
  if (!message->started) {
    // Nothing of it is on the wire: the peer never learns it existed.
    for (const auto& stream : streams_) {
      if (stream == nullptr) continue;
      auto& queue = stream->send_queue();
      queue.erase(std::remove_if(queue.begin(), queue.end(),
                                 [&](const OutFrame& frame) { return frame.message == message; }),
                  queue.end());
    }
    return;
  }
  // Partly sent: the peer expects the rest, so it goes out from a private copy.
  message->copy.reset(new uint8_t[message->size]);
  std::memcpy(message->copy.get(), message->data, message->size);
  message->data = message->copy.get();
}

// --- Setup -------------------------------------------------------------------------------

void TcpConnection::StartDial() {
  if (state_ != State::kConnecting || dial_stream_ != nullptr) return;
  ++dial_attempts_;
  const PeerAddress& target = mesh_.peer_address(peer_);
  const TcpDeviceOptions& options = mesh_.device_options();
  absl::StatusOr<security::Channel> channel = OpenChannel(target.address);
  if (!channel.ok()) {
    DialAttemptFailed(channel.status().message());
    return;
  }
  dial_id_ = RandomId();
  Hello hello;
  hello.stream_index = 0;
  hello.job_id = mesh_.job_id();
  hello.target_mesh_id = target.mesh_id;
  hello.source_mesh_id = mesh_.mesh_id();
  hello.source_rank = static_cast<uint32_t>(mesh_.rank());
  hello.target_rank = static_cast<uint32_t>(peer_);
  hello.stream_count = static_cast<uint32_t>(options.streams);
  hello.dial_id = dial_id_;
  dial_stream_ = Adopted(
      Stream::Dial(this, &engine_, 0, *std::move(channel), options.security.auth_key(), hello,
                   Deadline::After(options.handshake_timeout), options.max_message_bytes));
  engine_.RequestTick();
}

std::unique_ptr<Stream> TcpConnection::Adopted(std::unique_ptr<Stream> stream) const {
  if (congestion_by_size_) stream->SwitchCongestionBySize();
  return stream;
}

void TcpConnection::RetireStream(std::unique_ptr<Stream> stream) {
  if (stream == nullptr) return;
  stream->Close();
  engine_.Retire(std::move(stream));
}

void TcpConnection::DialAttemptFailed(absl::string_view why) {
  last_dial_error_ = std::string(why);
  RetireStream(std::move(dial_stream_));
  if (connect_deadline_.Expired()) {
    Fail(PeerUnavailableError(
        absl::StrCat("could not connect to ", *label_, " before the connect timeout (",
                     dial_attempts_, " attempts; last error: ", why,
                     "); is that rank running, and is its address reachable from here?"),
        peer_));
    return;
  }
  CHORUS_LOG(kDebug, "tcp") << "dial to " << *label_ << " failed (" << why << "); retrying in "
                            << dial_backoff_;
  next_dial_ = Deadline::After(dial_backoff_);
  dial_backoff_ = std::min(dial_backoff_ * 2, kMaxDialBackoff);
  engine_.RequestTick();
}

void TcpConnection::OnDialResult(Stream& stream, absl::StatusOr<HandshakeVerdict> result) {
  if (&stream != dial_stream_.get()) {
    // An extra stream of an established connection.
    const int index = stream.index();
    if (result.ok() && *result == HandshakeVerdict::kAccepted) return;
    CHORUS_LOG(kWarn, "tcp") << "stream " << index << " to " << *label_ << " could not be opened ("
                             << (result.ok() ? VerdictName(*result) : result.status().message())
                             << "); continuing with the other streams";
    if (index < static_cast<int>(streams_.size())) RetireStream(std::move(streams_[index]));
    return;
  }
  if (!result.ok()) {
    DialAttemptFailed(result.status().message());
    return;
  }
  switch (*result) {
    case HandshakeVerdict::kAccepted:
      dialed_by_us_ = true;
      streams_.clear();
      streams_.resize(mesh_.device_options().streams);
      streams_[0] = std::move(dial_stream_);
      BecomeUp();
      DialExtraStreams();
      return;
    case HandshakeVerdict::kSimultaneousDial:
      CHORUS_LOG(kDebug, "tcp") << *label_ << " is dialing us too and keeps its own dial";
      RetireStream(std::move(dial_stream_));
      state_ = State::kAwaitingPeerDial;
      engine_.RequestTick();
      return;
    default:
      Fail(PeerUnavailableError(
          absl::StrCat(*label_, " refused our connection: ", VerdictName(*result)), peer_));
      return;
  }
}

void TcpConnection::OnDialRefused(Stream& stream, absl::string_view why) {
  if (&stream != dial_stream_.get()) {
    CHORUS_LOG(kWarn, "tcp") << "stream " << stream.index() << " to " << *label_
                             << " could not be secured (" << why
                             << "); continuing with the other streams";
    if (stream.index() < static_cast<int>(streams_.size())) {
      RetireStream(std::move(streams_[stream.index()]));
    }
    return;
  }
  Fail(PeerUnavailableError(
      absl::StrCat("the link to ", *label_, " could not be secured: ", why, " (docs/security.md)"),
      peer_));
}

absl::StatusOr<security::Channel> TcpConnection::OpenChannel(const SocketAddress& address) const {
  const TcpDeviceOptions& options = mesh_.device_options();
  CHORUS_ASSIGN_OR_RETURN(ScopedFd fd, StartConnect(address, options.socket_buffer_bytes));
  CHORUS_RETURN_IF_ERROR(
      ApplyCongestionControl(fd.get(), options.congestion, mesh_.SameHostLinkWithCores(peer_)));
  return security::Channel::Open(std::move(fd), options.security.tls.get(),
                                 security::TlsContext::Role::kClient);
}

void TcpConnection::DialExtraStreams() {
  const TcpDeviceOptions& options = mesh_.device_options();
  const PeerAddress& target = mesh_.peer_address(peer_);
  for (size_t index = 1; index < streams_.size(); ++index) {
    absl::StatusOr<security::Channel> channel = OpenChannel(target.address);
    if (!channel.ok()) {
      CHORUS_LOG(kWarn, "tcp") << "stream " << index << " to " << *label_
                               << " could not be opened (" << channel.status().message()
                               << "); continuing with the other streams";
      continue;
    }
    Hello hello;
    hello.stream_index = static_cast<uint32_t>(index);
    hello.job_id = mesh_.job_id();
    hello.target_mesh_id = target.mesh_id;
    hello.source_mesh_id = mesh_.mesh_id();
    hello.source_rank = static_cast<uint32_t>(mesh_.rank());
    hello.target_rank = static_cast<uint32_t>(peer_);
    hello.stream_count = static_cast<uint32_t>(streams_.size());
    hello.dial_id = dial_id_;
    streams_[index] = Adopted(Stream::Dial(
        this, &engine_, static_cast<int>(index), *std::move(channel), options.security.auth_key(),
        hello, Deadline::After(options.handshake_timeout), options.max_message_bytes));
  }
  if (streams_.size() > 1) engine_.RequestTick();
}

HandshakeVerdict TcpConnection::EvaluateHello(const Hello& hello) const {
  if (state_ == State::kFailed) return HandshakeVerdict::kClosed;
  if (hello.stream_index == 0) {
    if (state_ == State::kUp) return HandshakeVerdict::kAlreadyConnected;
    // Both dialed: the lower rank's dial is kept, on both sides.
    if (dial_stream_ != nullptr && mesh_.rank() < peer_) return HandshakeVerdict::kSimultaneousDial;
    return HandshakeVerdict::kAccepted;
  }
  if (state_ != State::kUp || dialed_by_us_ || hello.dial_id != dial_id_ ||
      hello.stream_index >= streams_.size() || streams_[hello.stream_index] != nullptr) {
    return HandshakeVerdict::kBadStream;
  }
  return HandshakeVerdict::kAccepted;
}

void TcpConnection::AdoptStream(const Hello& hello, security::Channel channel) {
  const uint64_t max_bytes = mesh_.device_options().max_message_bytes;
  // The device's listener already took a named algorithm, so only a kernel that changed its
  // mind since refuses it here; the link still works on the default.
  const absl::Status congestion = ApplyCongestionControl(
      channel.fd(), mesh_.device_options().congestion, mesh_.SameHostLinkWithCores(peer_));
  if (!congestion.ok()) {
    CHORUS_LOG(kWarn, "tcp") << *label_ << ": " << congestion.message();
  }
  if (hello.stream_index == 0) {
    RetireStream(std::move(dial_stream_));
    dial_id_ = hello.dial_id;
    dialed_by_us_ = false;
    streams_.clear();
    streams_.resize(hello.stream_count);
    streams_[0] = Adopted(Stream::Accepted(this, &engine_, 0, std::move(channel), max_bytes));
    BecomeUp();
    return;
  }
  streams_[hello.stream_index] = Adopted(Stream::Accepted(
      this, &engine_, static_cast<int>(hello.stream_index), std::move(channel), max_bytes));
}

void TcpConnection::BecomeUp() {
  state_ = State::kUp;
  CHORUS_LOG(kInfo, "tcp") << "connected to " << *label_ << " ("
                           << (dialed_by_us_ ? "we dialed" : "it dialed") << ", " << streams_.size()
                           << " stream" << (streams_.size() > 1 ? "s" : "") << ")";
  std::deque<std::shared_ptr<OutboundMessage>> queued;
  queued.swap(unassigned_sends_);
  for (const auto& message : queued) {
    if (state_ != State::kUp) break;
    AssignFrames(message);
  }
}

bool TcpConnection::Tick() {
  switch (state_) {
    case State::kConnecting:
      if (dial_stream_ != nullptr) {
        if (dial_stream_->HandshakeExpired()) {
          DialAttemptFailed("no handshake reply before the handshake timeout");
        } else if (connect_deadline_.Expired()) {
          DialAttemptFailed("the connection attempt was still under way");
        }
      } else if (next_dial_.Expired()) {
        StartDial();
      }
      return state_ == State::kConnecting || state_ == State::kAwaitingPeerDial;
    case State::kAwaitingPeerDial:
      if (connect_deadline_.Expired()) {
        Fail(PeerUnavailableError(
            absl::StrCat(*label_,
                         " won a simultaneous dial but its connection did not arrive "
                         "before the connect timeout"),
            peer_));
        return false;
      }
      return true;
    case State::kUp: {
      bool dialing = false;
      for (size_t index = 1; index < streams_.size(); ++index) {
        Stream* stream = streams_[index].get();
        if (stream == nullptr || stream->open()) continue;
        if (stream->HandshakeExpired()) {
          OnDialResult(*stream, PeerUnavailableError("no handshake reply before the timeout"));
        } else {
          dialing = true;
        }
      }
      return dialing;
    }
    case State::kFailed:
      return false;
  }
  return false;
}

// --- Failure -----------------------------------------------------------------------------

void TcpConnection::OnStreamFailed(Stream& stream, absl::string_view why, bool tampered) {
  Fail(PeerUnavailableError(
      absl::StrCat(*label_, " is unavailable: stream ", stream.index(), " ", why,
                   tampered ? " (TLS found bytes changed on the way: a faulty or hostile "
                              "network path between the ranks)"
                            : " (did that process exit or crash?)"),
      peer_));
}

absl::Status TcpConnection::PeerClosedError() const {
  return PeerUnavailableError(
      absl::StrCat(*label_, " closed the connection (EOF); did that process exit or crash?"),
      peer_);
}

void TcpConnection::OnStreamEof(Stream& stream, bool mid_frame) {
  if (state_ == State::kFailed) return;
  if (mid_frame) {
    Fail(PeerUnavailableError(
        absl::StrCat(*label_, " is unavailable: stream ", stream.index(),
                     " closed the connection (EOF) in the middle of a message (did that "
                     "process exit or crash?)"),
        peer_));
    return;
  }
  if (stream.index() == 0) peer_closed_ = true;
  FailIfPeerGone();
}

void TcpConnection::FailIfPeerGone() {
  if (!peer_closed_ || state_ == State::kFailed) return;
  // Streams paused on a message that was never announced wait for nothing now.
  for (size_t index = 1; index < streams_.size() && !inbound_.empty(); ++index) {
    const Stream* stream = streams_[index].get();
    if (stream != nullptr && stream->open() && !stream->paused()) return;
  }
  Fail(PeerClosedError());
}

size_t TcpConnection::PendingCount() const {
  size_t count = unassigned_sends_.size() + inbound_.size() + mesh_.matching().PostedCount(peer_);
  for (const auto& stream : streams_) {
    if (stream != nullptr) count += stream->send_queue().size();
  }
  return count;
}

void TcpConnection::Fail(const absl::Status& status) {
  if (state_ == State::kFailed) return;
  const size_t pending = PendingCount();
  if (pending > 0 && GetErrorKind(status) != ErrorKind::kAborted) {
    CHORUS_LOG(kWarn, "tcp") << status.message() << "; failing " << pending
                             << " pending operation(s)";
  } else {
    CHORUS_LOG(kInfo, "tcp") << "connection to " << *label_ << " closed: " << status.message();
  }
  state_ = State::kFailed;
  failure_ = status;
  // Sockets first: from here on nothing is read into or written from a caller's buffer.
  RetireStream(std::move(dial_stream_));
  std::vector<std::shared_ptr<OutboundMessage>> sends(unassigned_sends_.begin(),
                                                      unassigned_sends_.end());
  unassigned_sends_.clear();
  for (auto& stream : streams_) {
    if (stream == nullptr) continue;
    for (const OutFrame& frame : stream->send_queue()) sends.push_back(frame.message);
    stream->send_queue().clear();
    RetireStream(std::move(stream));
  }
  streams_.clear();
  for (const auto& message : sends) message->request->Finish(status, 0);
  TcpMesh::Matching& matching = mesh_.matching();
  for (const auto& [tag, slot] : matching.TakePosted(peer_)) {
    matching.Unpost(peer_, tag, *slot);  // a receive from any peer fails with any of them
    slot->request->Finish(status, 0, peer_);
  }
  auto inbound = std::move(inbound_);
  inbound_.clear();
  for (auto& [seq, message] : inbound) {
    message->discard = true;
    message->buffered.reset();
    if (message->slot != nullptr) message->slot->request->Finish(status, 0, peer_);
    message->slot.reset();
  }
  // Messages that arrived whole stay receivable; the partial ones are gone.
  matching.RetainUnexpected(peer_, [](const auto& arrived) { return arrived.message->complete; });
}

}  // namespace chorus::tcp
