#include "chorus/transport/tcp/stream.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"

namespace chorus::tcp {
namespace {

// Bytes received per socket read into the staging buffer: small messages and headers arrive
// together in one recv().
constexpr size_t kStagingSize = 64 * 1024;
// A payload with at least this much left (and nothing staged) is received straight into its
// destination, without passing through the staging buffer.
constexpr size_t kDirectReadMin = 4 * 1024;
// The buffer a message for a receive with a sink is read into, piece by piece, and handed
// over from: small enough to stay in the core's cache between the socket's copy into it and
// the sink's read (a reduction, say), large enough that a read takes many packets at once.
constexpr size_t kSinkBufferSize = 256 * 1024;
// Bytes one OnEvents call reads before letting other sockets have a turn.
constexpr size_t kReadBudget = 4 * 1024 * 1024;
// Frames gathered into one sendmsg().
constexpr int kFramesPerWrite = 32;
// Bytes one OnEvents call writes before letting other sockets have a turn.
constexpr size_t kWriteBudget = 4 * 1024 * 1024;

using security::IoResult;

uint32_t EventFor(const IoResult& result) {
  return result.kind == IoResult::Kind::kWantWrite ? uint32_t{EPOLLOUT} : uint32_t{EPOLLIN};
}

}  // namespace

std::unique_ptr<Stream> Stream::Dial(StreamOwner* owner, ProgressEngine* engine, int index,
                                     security::Channel channel, const security::AuthKey* auth_key,
                                     const Hello& hello, Deadline handshake_deadline,
                                     uint64_t max_message_bytes) {
  std::unique_ptr<Stream> stream(new Stream(owner, engine, index, std::move(channel),
                                            State::kConnecting, handshake_deadline,
                                            max_message_bytes));
  stream->auth_ = std::make_unique<security::AuthExchange>(security::AuthExchange::Role::kDialer,
                                                           auth_key, security::kTransportLinkLabel);
  stream->hello_ = EncodeHello(hello);
  return stream;
}

std::unique_ptr<Stream> Stream::Accepted(StreamOwner* owner, ProgressEngine* engine, int index,
                                         security::Channel channel, uint64_t max_message_bytes) {
  std::unique_ptr<Stream> stream(new Stream(owner, engine, index, std::move(channel),
                                            State::kOpen, Deadline::Infinite(),
                                            max_message_bytes));
  // Bytes the peer sent right after the handshake may already sit in the TLS session.
  if (stream->channel_.HasBufferedInput()) engine->MarkReady(stream->token_);
  return stream;
}

Stream::Stream(StreamOwner* owner, ProgressEngine* engine, int index, security::Channel channel,
               State state, Deadline handshake_deadline, uint64_t max_message_bytes)
    : owner_(owner),
      engine_(engine),
      index_(index),
      channel_(std::move(channel)),
      state_(state),
      handshake_deadline_(handshake_deadline),
      max_message_bytes_(max_message_bytes) {
  if (state_ == State::kOpen) staging_.reset(new uint8_t[kStagingSize]);
  interest_ = state_ == State::kOpen ? EPOLLIN : EPOLLOUT;
  token_ = engine_->Register(channel_.fd(), interest_, this);
}

Stream::~Stream() { Close(); }

bool Stream::HandshakeExpired() const {
  return state_ != State::kOpen && state_ != State::kClosed && handshake_deadline_.Expired();
}

void Stream::Close() {
  if (state_ == State::kClosed) return;
  engine_->Unregister(token_, channel_.fd());
  channel_.Close();
  state_ = State::kClosed;
  auth_.reset();
  body_.reset();
  paused_header_.reset();
}

void Stream::Enqueue(OutFrame frame) {
  if (congestion_by_size_) congestion_by_size_->Before(frame.length, send_queue_.empty());
  send_queue_.push_back(std::move(frame));
}

void Stream::UpdateInterest() {
  uint32_t want = 0;
  switch (state_) {
    case State::kConnecting:
    case State::kSendingHello:
      want = EPOLLOUT;
      break;
    case State::kSecuring:
      want = dial_wants_;
      break;
    case State::kAwaitingReply:
      want = EPOLLIN;
      break;
    case State::kOpen:
      want = (paused_header_ && !write_wants_read_ ? 0u : uint32_t{EPOLLIN}) |
             (send_queue_.empty() && !read_wants_write_ ? 0u : uint32_t{EPOLLOUT});
      break;
    case State::kClosed:
      return;
  }
  if (want != interest_) {
    engine_->SetInterest(token_, channel_.fd(), want);
    interest_ = want;
  }
}

void Stream::OnEvents(uint32_t events) {
  switch (state_) {
    case State::kConnecting: {
      const int error = TakeSocketError(channel_.fd());
      if (error != 0) {
        DialFailed(absl::StrCat("connect: ", ErrnoText(error)));
        return;
      }
      if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
      state_ = State::kSecuring;
      Secure();
      return;
    }
    case State::kSecuring:
      Secure();
      return;
    case State::kSendingHello:
      SendHello();
      return;
    case State::kAwaitingReply:
      ReadReply();
      return;
    case State::kOpen: {
      if (paused_header_ && (events & (EPOLLHUP | EPOLLERR))) {
        const int error = TakeSocketError(channel_.fd());
        Fail(error != 0 ? ErrnoText(error) : "connection closed");
        return;
      }
      // Under TLS a read may wait for the socket to be writable, and a write for readable.
      const bool readable = (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0;
      const bool writable = (events & EPOLLOUT) != 0;
      if (readable || (read_wants_write_ && writable)) ReadFrames();
      if (state_ == State::kOpen && (writable || (write_wants_read_ && readable))) {
        Flush(kWriteBudget);
      }
      return;
    }
    case State::kClosed:
      return;
  }
}

bool Stream::DialStepStopped(const IoResult& result, absl::string_view step) {
  switch (result.kind) {
    case IoResult::Kind::kDone:
      return false;
    case IoResult::Kind::kWantRead:
    case IoResult::Kind::kWantWrite:
      dial_wants_ = EventFor(result);
      UpdateInterest();
      return true;
    case IoResult::Kind::kClosed:
      DialFailed(absl::StrCat("the peer closed the connection during the ", step));
      return true;
    case IoResult::Kind::kError:
      // A failed system call may pass (the peer restarting); a TLS refusal will not.
      // Errors name their call ("recv: ...", "TLS handshake: ...").
      if (result.error_number != 0) {
        DialFailed(result.error);
      } else {
        DialRefused(result.error);
      }
      return true;
  }
  return true;
}

void Stream::Secure() {
  // Read `stage` only once DriveSecuring has set it (argument order is unspecified).
  const char* stage = nullptr;
  const IoResult secured = security::DriveSecuring(channel_, *auth_, &stage);
  if (DialStepStopped(secured, stage)) return;
  if (!auth_->result().ok()) {
    DialRefused(auth_->result().message());
    return;
  }
  auth_.reset();
  state_ = State::kSendingHello;
  SendHello();
}

void Stream::SendHello() {
  while (hello_sent_ < hello_.size()) {
    const IoResult sent = channel_.Write(hello_.data() + hello_sent_, hello_.size() - hello_sent_);
    if (!sent.done()) {
      if (sent.blocked()) {
        UpdateInterest();
      } else {
        DialFailed(absl::StrCat("sending the handshake: ", sent.error));
      }
      return;
    }
    hello_sent_ += sent.bytes;
  }
  state_ = State::kAwaitingReply;
  UpdateInterest();
}

void Stream::ReadReply() {
  while (reply_received_ < reply_.size()) {
    const IoResult got =
        channel_.Read(reply_.data() + reply_received_, reply_.size() - reply_received_);
    if (got.done()) {
      reply_received_ += got.bytes;
    } else if (got.kind == IoResult::Kind::kClosed) {
      DialFailed("the peer closed the connection during the handshake");
      return;
    } else if (got.blocked()) {
      return;
    } else {
      DialFailed(absl::StrCat("reading the handshake reply: ", got.error));
      return;
    }
  }
  absl::StatusOr<HandshakeVerdict> verdict = DecodeReply(reply_);
  if (!verdict.ok()) {
    DialFailed(verdict.status().message());
    return;
  }
  if (*verdict == HandshakeVerdict::kAccepted) {
    state_ = State::kOpen;
    staging_.reset(new uint8_t[kStagingSize]);
    UpdateInterest();
    // The peer may send right after its reply; TLS may have read that in with the reply.
    if (channel_.HasBufferedInput()) engine_->MarkReady(token_);
  }
  owner_->OnDialResult(*this, *verdict);
}

void Stream::DialFailed(absl::string_view why) {
  owner_->OnDialResult(*this, PeerUnavailableError(why));
}

void Stream::DialRefused(absl::string_view why) { owner_->OnDialRefused(*this, why); }

void Stream::Fail(absl::string_view why, bool tampered) {
  owner_->OnStreamFailed(*this, why, tampered);
  Close();
}

void Stream::RecvFailed(const IoResult& result) {
  // A peer that closes a socket with bytes of ours still unread makes its kernel answer with a
  // reset instead of a FIN: on a stream between frames that is the peer closing, like an EOF,
  // and the connection fails only once no stream can bring what it still expects
  // (TcpConnection::OnStreamEof). Failing the whole connection at once lost messages the peer
  // had sent in full on its other streams before it closed.
  // A reset in the middle of a frame still fails the connection at once, and says "reset".
  if (result.error_number == ECONNRESET && !MidFrame()) {
    Eof();
    return;
  }
  // Under TLS, a failure that is no system call's is a record that did not decrypt or verify.
  Fail(absl::StrCat(result.error, MidFrame() ? " in the middle of a message" : ""),
       /*tampered=*/channel_.secure() && result.error_number == 0);
}

bool Stream::MidFrame() const { return body_remaining_ > 0 || staged_end_ > staged_begin_; }

void Stream::Eof() {
  const bool mid_frame = MidFrame();
  Close();
  owner_->OnStreamEof(*this, mid_frame);
}

void Stream::Flush(size_t budget) {
  while (state_ == State::kOpen && !send_queue_.empty() && budget > 0) {
    iovec iov[2 * kFramesPerWrite];
    int count = 0;
    // Each frame may add two entries (rest of header, rest of payload), so stop while both fit.
    for (auto it = send_queue_.begin();
         it != send_queue_.end() && count + 2 <= 2 * kFramesPerWrite; ++it) {
      if (it->header_sent < kFrameHeaderSize) {
        iov[count++] = {it->header.data() + it->header_sent, kFrameHeaderSize - it->header_sent};
      }
      if (it->payload_sent < it->length) {
        iov[count++] = {const_cast<uint8_t*>(it->message->data) + it->offset + it->payload_sent,
                        it->length - it->payload_sent};
      }
    }
    const IoResult sent = channel_.WriteGather(iov, count);
    write_wants_read_ = sent.kind == IoResult::Kind::kWantRead;
    if (sent.blocked()) break;
    if (!sent.done()) {
      Fail(sent.kind == IoResult::Kind::kClosed ? "send: the peer closed the connection"
                                                : sent.error);
      return;
    }
    size_t left = sent.bytes;
    budget -= std::min(budget, left);
    while (!send_queue_.empty()) {
      OutFrame& frame = send_queue_.front();
      const size_t header_part = std::min(left, kFrameHeaderSize - frame.header_sent);
      frame.header_sent += header_part;
      left -= header_part;
      const size_t payload_part =
          static_cast<size_t>(std::min<uint64_t>(left, frame.length - frame.payload_sent));
      frame.payload_sent += payload_part;
      left -= payload_part;
      if (header_part + payload_part > 0) frame.message->started = true;
      if (frame.header_sent < kFrameHeaderSize || frame.payload_sent < frame.length) break;
      std::shared_ptr<OutboundMessage> done = std::move(frame.message);
      send_queue_.pop_front();
      if (--done->frames_left == 0) done->request->Finish(absl::OkStatus(), done->size);
    }
  }
  UpdateInterest();
}

void Stream::ReadFrames() {
  size_t budget = kReadBudget;
  bool socket_drained = false;
  while (state_ == State::kOpen && !paused_header_) {
    const size_t staged = staged_end_ - staged_begin_;
    if (body_remaining_ > 0 && staged > 0) {
      const size_t count = static_cast<size_t>(std::min<uint64_t>(staged, body_remaining_));
      const uint8_t* from = staging_.get() + staged_begin_;
      staged_begin_ += count;
      AccountBody(from, count);
      continue;
    }
    if (body_remaining_ == 0 && staged >= kFrameHeaderSize) {
      absl::StatusOr<FrameHeader> header = DecodeFrameHeader(
          absl::MakeConstSpan(staging_.get() + staged_begin_, staged), max_message_bytes_);
      if (!header.ok()) {
        Fail(absl::StrCat("malformed frame: ", header.status().message()));
        return;
      }
      staged_begin_ += kFrameHeaderSize;
      HandleHeader(*header);
      continue;
    }
    // Everything staged is parsed; more must come from the socket.
    if (socket_drained) return;
    if (budget == 0) {
      engine_->MarkReady(token_);
      return;
    }
    if (body_remaining_ >= kDirectReadMin) {
      uint8_t* destination = body_->destination();
      size_t want = static_cast<size_t>(std::min<uint64_t>(body_remaining_, budget));
      uint8_t* into;
      if (body_->sink() != nullptr) {
        into = SinkBuffer() + sink_fill_;
        want = std::min(want, kSinkBufferSize - sink_fill_);
      } else if (destination != nullptr) {
        into = destination + body_offset_;
      } else {
        into = staging_.get();
        want = std::min(want, kStagingSize);
      }
      const IoResult got = channel_.Read(into, want);
      if (got.done()) {
        budget -= got.bytes;
        socket_drained = got.bytes < want && !channel_.HasBufferedInput();
        AccountBody(nullptr, got.bytes);
        continue;
      }
      ReadStopped(got);
      return;
    }
    if (staged_begin_ > 0) {
      std::memmove(staging_.get(), staging_.get() + staged_begin_, staged);
      staged_begin_ = 0;
      staged_end_ = staged;
    }
    const size_t room = kStagingSize - staged_end_;
    const IoResult got = channel_.Read(staging_.get() + staged_end_, room);
    if (got.done()) {
      staged_end_ += got.bytes;
      budget -= std::min(budget, got.bytes);
      socket_drained = got.bytes < room && !channel_.HasBufferedInput();
      continue;
    }
    ReadStopped(got);
    return;
  }
}

void Stream::ReadStopped(const IoResult& result) {
  switch (result.kind) {
    case IoResult::Kind::kDone:
      return;
    case IoResult::Kind::kWantRead:
    case IoResult::Kind::kWantWrite:
      if (read_wants_write_ != (result.kind == IoResult::Kind::kWantWrite)) {
        read_wants_write_ = !read_wants_write_;
        UpdateInterest();
      }
      return;
    case IoResult::Kind::kClosed:
      Eof();
      return;
    case IoResult::Kind::kError:
      RecvFailed(result);
      return;
  }
}

void Stream::HandleHeader(const FrameHeader& header) {
  const FrameTarget target = owner_->OnFrameHeader(*this, header);
  switch (target.action) {
    case FrameTarget::Action::kStop:
      return;
    case FrameTarget::Action::kPause:
      paused_header_ = header;
      UpdateInterest();
      return;
    case FrameTarget::Action::kDeliver:
      if (header.length > 0) {
        body_ = target.message;
        body_frame_ = body_->frames.size();
        body_->frames.emplace_back(header.offset, 0);
        sink_fill_ = 0;
        body_offset_ = header.offset;
        body_remaining_ = header.length;
      }
      return;
  }
}

void Stream::AccountBody(const uint8_t* from, size_t count) {
  std::shared_ptr<InboundMessage> message = body_;
  if (RecvSink* sink = message->sink()) {
    // Appended to the sink buffer unless it was read straight there (from == null).
    if (from != nullptr) std::memcpy(SinkBuffer() + sink_fill_, from, count);
    sink_fill_ += count;
    // Pieces end at a multiple of the sink's alignment from the frame's start (itself such a
    // multiple), except the frame's last; the remainder starts the next piece.
    const bool frame_done = count == body_remaining_;
    const size_t piece =
        frame_done ? sink_fill_ : sink_fill_ / RecvSink::kAlignment * RecvSink::kAlignment;
    if (piece > 0) {
      sink->Consume(body_offset_ + count - sink_fill_, sink_buffer_.get(), piece);
      sink_fill_ -= piece;
      std::memmove(sink_buffer_.get(), sink_buffer_.get() + piece, sink_fill_);
    }
  } else if (from != nullptr) {
    uint8_t* destination = message->destination();
    if (destination != nullptr) std::memcpy(destination + body_offset_, from, count);
  }
  body_offset_ += count;
  body_remaining_ -= count;
  message->received += count;
  message->frames[body_frame_].second += count;
  if (body_remaining_ == 0) body_.reset();
  if (message->received == message->size) owner_->OnMessageComplete(message);
}

uint8_t* Stream::SinkBuffer() {
  if (sink_buffer_ == nullptr) sink_buffer_.reset(new uint8_t[kSinkBufferSize]);
  return sink_buffer_.get();
}

void Stream::Resume() {
  const FrameHeader header = *paused_header_;
  paused_header_.reset();
  HandleHeader(header);
  UpdateInterest();
  // Bytes already staged would not raise another epoll event.
  if (state_ == State::kOpen && !paused_header_) engine_->MarkReady(token_);
}

}  // namespace chorus::tcp
