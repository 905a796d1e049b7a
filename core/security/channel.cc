#include "chorus/core/security/channel.h"

#include <errno.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "chorus/core/socket.h"
#include "chorus/core/status.h"

namespace chorus::security {
namespace {

// The outcome of a failed or short send()/recv() on a non-blocking socket.
IoResult SocketOutcome(ssize_t returned, bool reading, const char* operation) {
  IoResult result;
  if (returned > 0) {
    result.bytes = static_cast<size_t>(returned);
    return result;
  }
  if (returned == 0) {
    result.kind = IoResult::Kind::kClosed;
    return result;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK) {
    result.kind = reading ? IoResult::Kind::kWantRead : IoResult::Kind::kWantWrite;
    return result;
  }
  result.kind = IoResult::Kind::kError;
  result.error_number = errno;
  result.error = absl::StrCat(operation, ": ", ErrnoText(errno));
  return result;
}

}  // namespace

absl::StatusOr<Channel> Channel::Open(ScopedFd fd, const TlsContext* tls, TlsContext::Role role) {
  Channel channel(std::move(fd));
  if (tls != nullptr) {
    absl::StatusOr<std::unique_ptr<TlsSession>> session = tls->NewSession(channel.fd(), role);
    if (!session.ok()) return session.status();
    channel.tls_ = *std::move(session);
    channel.tls_server_ = role == TlsContext::Role::kServer;
  }
  return channel;
}

Channel::~Channel() { Close(); }

void Channel::Close() {
  if (tls_ != nullptr) {
    if (fd_.valid()) tls_->Shutdown();
    tls_.reset();
  }
  fd_.Reset();
}

void Channel::DiscardInput() {
  uint8_t sink[4096];
  for (int i = 0; i < 16; ++i) {
    const ssize_t got = recv(fd_.get(), sink, sizeof(sink), MSG_DONTWAIT);
    if (got <= 0 && !(got < 0 && errno == EINTR)) return;
  }
}

IoResult Channel::Handshake() {
  if (tls_ == nullptr) return IoResult{};
  if (tls_server_ && !first_byte_checked_) {
    // A TLS client opens with a handshake record (byte 22); a plain Chorus dialer with an
    // authentication offer ('C'), which would otherwise wait for a challenge that never comes.
    uint8_t first = 0;
    const ssize_t got = recv(fd_.get(), &first, 1, MSG_PEEK | MSG_DONTWAIT);
    if (got < 0 && errno == EINTR) return IoResult{IoResult::Kind::kWantRead, 0, 0, {}};
    if (got <= 0) return SocketOutcome(got, /*reading=*/true, "recv");
    first_byte_checked_ = true;
    if (first == static_cast<uint8_t>('C')) {
      Challenge refusal;
      refusal.requires_tls = true;
      const auto bytes = EncodeChallenge(refusal);
      (void)send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      DiscardInput();
      IoResult result;
      result.kind = IoResult::Kind::kError;
      result.error =
          "the peer does not use TLS and this process requires it; set CHORUS_TLS_CERT, "
          "CHORUS_TLS_KEY and CHORUS_TLS_CA there as here";
      return result;
    }
  }
  return tls_->Handshake();
}

IoResult Channel::Read(void* into, size_t size) {
  if (tls_ != nullptr) return tls_->Read(into, size);
  while (true) {
    const ssize_t got = recv(fd_.get(), into, size, MSG_DONTWAIT);
    if (got < 0 && errno == EINTR) continue;
    return SocketOutcome(got, /*reading=*/true, "recv");
  }
}

IoResult Channel::Write(const void* from, size_t size) {
  if (tls_ != nullptr) return tls_->Write(from, size);
  while (true) {
    const ssize_t sent = send(fd_.get(), from, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0 && errno == EINTR) continue;
    return SocketOutcome(sent, /*reading=*/false, "send");
  }
}

IoResult Channel::WriteGather(const iovec* buffers, int count) {
  if (tls_ == nullptr) {
    msghdr message{};
    message.msg_iov = const_cast<iovec*>(buffers);
    message.msg_iovlen = static_cast<size_t>(count);
    while (true) {
      const ssize_t sent = sendmsg(fd_.get(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent < 0 && errno == EINTR) continue;
      return SocketOutcome(sent, /*reading=*/false, "send");
    }
  }
  // A large leading buffer goes out as it is; small ones are gathered, so that a frame header
  // and a small payload make one record instead of two. Either way the bytes offered start
  // where the previous call's did, as a retried SSL_write requires.
  if (count == 0) return IoResult{};
  if (buffers[0].iov_len >= kGatherBytes) {
    return tls_->Write(buffers[0].iov_base, buffers[0].iov_len);
  }
  uint8_t gathered[kGatherBytes];
  size_t size = 0;
  for (int i = 0; i < count && size < kGatherBytes; ++i) {
    const size_t take = std::min(buffers[i].iov_len, kGatherBytes - size);
    std::memcpy(gathered + size, buffers[i].iov_base, take);
    size += take;
  }
  return tls_->Write(gathered, size);
}

IoResult DriveSecuring(Channel& channel, AuthExchange& exchange, const char** stage) {
  *stage = "TLS handshake";
  IoResult result = channel.Handshake();
  if (!result.done()) return result;
  *stage = "authentication";
  return DriveExchange(channel, exchange);
}

IoResult DriveExchange(Channel& channel, AuthExchange& exchange) {
  while (!exchange.finished()) {
    if (const absl::Span<const uint8_t> out = exchange.output(); !out.empty()) {
      IoResult sent = channel.Write(out.data(), out.size());
      if (!sent.done()) return sent;
      exchange.OutputSent(sent.bytes);
      continue;
    }
    const absl::Span<uint8_t> in = exchange.input();
    IoResult got = channel.Read(in.data(), in.size());
    if (!got.done()) return got;
    exchange.InputReceived(got.bytes);
  }
  return IoResult{};
}

}  // namespace chorus::security
