#include "chorus/transport/tcp/stream.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
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
// Bytes one OnEvents call reads before letting other sockets have a turn.
constexpr size_t kReadBudget = 4 * 1024 * 1024;
// Frames gathered into one sendmsg().
constexpr int kFramesPerWrite = 32;
// Bytes one OnEvents call writes before letting other sockets have a turn.
constexpr size_t kWriteBudget = 4 * 1024 * 1024;

}  // namespace

std::unique_ptr<Stream> Stream::Dial(StreamOwner* owner, ProgressEngine* engine, int index,
                                     ScopedFd fd, const Hello& hello, Deadline handshake_deadline,
                                     uint64_t max_message_bytes) {
  std::unique_ptr<Stream> stream(new Stream(owner, engine, index, std::move(fd), State::kConnecting,
                                            handshake_deadline, max_message_bytes));
  stream->hello_ = EncodeHello(hello);
  return stream;
}

std::unique_ptr<Stream> Stream::Accepted(StreamOwner* owner, ProgressEngine* engine, int index,
                                         ScopedFd fd, uint64_t max_message_bytes) {
  return std::unique_ptr<Stream>(new Stream(owner, engine, index, std::move(fd), State::kOpen,
                                            Deadline::Infinite(), max_message_bytes));
}

Stream::Stream(StreamOwner* owner, ProgressEngine* engine, int index, ScopedFd fd, State state,
               Deadline handshake_deadline, uint64_t max_message_bytes)
    : owner_(owner),
      engine_(engine),
      index_(index),
      fd_(std::move(fd)),
      state_(state),
      handshake_deadline_(handshake_deadline),
      max_message_bytes_(max_message_bytes) {
  if (state_ == State::kOpen) staging_.reset(new uint8_t[kStagingSize]);
  interest_ = state_ == State::kOpen ? EPOLLIN : EPOLLOUT;
  token_ = engine_->Register(fd_.get(), interest_, this);
}

Stream::~Stream() { Close(); }

bool Stream::HandshakeExpired() const {
  return (state_ == State::kConnecting || state_ == State::kSendingHello ||
          state_ == State::kAwaitingReply) &&
         handshake_deadline_.Expired();
}

void Stream::Close() {
  if (state_ == State::kClosed) return;
  engine_->Unregister(token_, fd_.get());
  fd_.Reset();
  state_ = State::kClosed;
  body_.reset();
  paused_header_.reset();
}

void Stream::UpdateInterest() {
  uint32_t want = 0;
  switch (state_) {
    case State::kConnecting:
    case State::kSendingHello:
      want = EPOLLOUT;
      break;
    case State::kAwaitingReply:
      want = EPOLLIN;
      break;
    case State::kOpen:
      want = (paused_header_ ? 0u : uint32_t{EPOLLIN}) |
             (send_queue_.empty() ? 0u : uint32_t{EPOLLOUT});
      break;
    case State::kClosed:
      return;
  }
  if (want != interest_) {
    engine_->SetInterest(token_, fd_.get(), want);
    interest_ = want;
  }
}

void Stream::OnEvents(uint32_t events) {
  switch (state_) {
    case State::kConnecting: {
      const int error = TakeSocketError(fd_.get());
      if (error != 0) {
        DialFailed(absl::StrCat("connect: ", ErrnoText(error)));
        return;
      }
      if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
      state_ = State::kSendingHello;
      SendHello();
      return;
    }
    case State::kSendingHello:
      SendHello();
      return;
    case State::kAwaitingReply:
      ReadReply();
      return;
    case State::kOpen:
      if (paused_header_ && (events & (EPOLLHUP | EPOLLERR))) {
        const int error = TakeSocketError(fd_.get());
        Fail(error != 0 ? ErrnoText(error) : "connection closed");
        return;
      }
      if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) ReadFrames();
      if (state_ == State::kOpen && (events & EPOLLOUT)) Flush(kWriteBudget);
      return;
    case State::kClosed:
      return;
  }
}

void Stream::SendHello() {
  while (hello_sent_ < hello_.size()) {
    const ssize_t sent = send(fd_.get(), hello_.data() + hello_sent_, hello_.size() - hello_sent_,
                              MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      hello_sent_ += static_cast<size_t>(sent);
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      UpdateInterest();
      return;
    } else {
      DialFailed(absl::StrCat("sending the handshake: ", ErrnoText(errno)));
      return;
    }
  }
  state_ = State::kAwaitingReply;
  UpdateInterest();
}

void Stream::ReadReply() {
  while (reply_received_ < reply_.size()) {
    const ssize_t got = recv(fd_.get(), reply_.data() + reply_received_,
                             reply_.size() - reply_received_, MSG_DONTWAIT);
    if (got > 0) {
      reply_received_ += static_cast<size_t>(got);
    } else if (got == 0) {
      DialFailed("the peer closed the connection during the handshake");
      return;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return;
    } else {
      DialFailed(absl::StrCat("reading the handshake reply: ", ErrnoText(errno)));
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
  }
  owner_->OnDialResult(*this, *verdict);
}

void Stream::DialFailed(absl::string_view why) {
  owner_->OnDialResult(*this, PeerUnavailableError(why));
}

void Stream::Fail(absl::string_view why) {
  owner_->OnStreamFailed(*this, why);
  Close();
}

void Stream::RecvFailed(int error) {
  // A peer that closes a socket with bytes of ours still unread makes its kernel answer with a
  // reset instead of a FIN: on a stream between frames that is the peer closing, like an EOF,
  // and the connection fails only once no stream can bring what it still expects
  // (TcpConnection::OnStreamEof). Failing the whole connection at once lost messages the peer
  // had sent in full on its other streams before it closed.
  // A reset in the middle of a frame still fails the connection at once, and says "reset".
  if (error == ECONNRESET && !MidFrame()) {
    Eof();
    return;
  }
  Fail(absl::StrCat("recv: ", ErrnoText(error), MidFrame() ? " in the middle of a message" : ""));
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
    msghdr message{};
    message.msg_iov = iov;
    message.msg_iovlen = count;
    const ssize_t sent = sendmsg(fd_.get(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      Fail(absl::StrCat("send: ", ErrnoText(errno)));
      return;
    }
    size_t left = static_cast<size_t>(sent);
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
      uint8_t* into = destination != nullptr ? destination + body_offset_ : staging_.get();
      if (destination == nullptr) want = std::min(want, kStagingSize);
      const ssize_t got = recv(fd_.get(), into, want, MSG_DONTWAIT);
      if (got > 0) {
        budget -= static_cast<size_t>(got);
        socket_drained = static_cast<size_t>(got) < want;
        AccountBody(nullptr, static_cast<size_t>(got));
        continue;
      }
      if (got == 0) {
        Eof();
        return;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) RecvFailed(errno);
      return;
    }
    if (staged_begin_ > 0) {
      std::memmove(staging_.get(), staging_.get() + staged_begin_, staged);
      staged_begin_ = 0;
      staged_end_ = staged;
    }
    const size_t room = kStagingSize - staged_end_;
    const ssize_t got = recv(fd_.get(), staging_.get() + staged_end_, room, MSG_DONTWAIT);
    if (got > 0) {
      staged_end_ += static_cast<size_t>(got);
      budget -= std::min(budget, static_cast<size_t>(got));
      socket_drained = static_cast<size_t>(got) < room;
      continue;
    }
    if (got == 0) {
      Eof();
      return;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) RecvFailed(errno);
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
        body_offset_ = header.offset;
        body_remaining_ = header.length;
      }
      return;
  }
}

void Stream::AccountBody(const uint8_t* from, size_t count) {
  std::shared_ptr<InboundMessage> message = body_;
  if (from != nullptr) {
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

void Stream::Resume() {
  const FrameHeader header = *paused_header_;
  paused_header_.reset();
  HandleHeader(header);
  UpdateInterest();
  // Bytes already staged would not raise another epoll event.
  if (state_ == State::kOpen && !paused_header_) engine_->MarkReady(token_);
}

}  // namespace chorus::tcp
