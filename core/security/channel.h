// One end of a TCP link, plain or under TLS: the socket and, when the job uses TLS, its session.
// Every read and write of the TCP transport's streams and of the TCP store goes through it, so
// those know nothing of TLS. Non-blocking; thread-compatible.
#ifndef CHORUS_CORE_SECURITY_CHANNEL_H_
#define CHORUS_CORE_SECURITY_CHANNEL_H_

#include <sys/uio.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "chorus/core/security/auth_exchange.h"
#include "chorus/core/security/io_result.h"
#include "chorus/core/security/tls.h"
#include "chorus/core/socket.h"

namespace chorus::security {

class Channel {
 public:
  Channel() = default;
  // A plain link over `fd`.
  explicit Channel(ScopedFd fd) : fd_(std::move(fd)) {}
  // A TLS link over `fd` when `tls` is non-null (in `role`), else a plain one.
  static absl::StatusOr<Channel> Open(ScopedFd fd, const TlsContext* tls,
                                      TlsContext::Role role);
  Channel(Channel&&) = default;
  Channel& operator=(Channel&&) = default;
  ~Channel();

  int fd() const { return fd_.get(); }
  bool valid() const { return fd_.valid(); }
  bool secure() const { return tls_ != nullptr; }
  // Sends TLS's close_notify (best effort) and closes the socket. Idempotent.
  void Close();
  // Reads and drops what has arrived: called before closing a link that is refused, so that
  // the kernel ends it with a FIN the peer reads after the refusal, not with a reset that can
  // destroy the refusal before the peer reads it.
  void DiscardInput();

  // Advances the TLS handshake; kDone at once on a plain link. A TLS acceptor whose dialer
  // turns out to be a plain Chorus dialer sends it a refusal it can read (auth_exchange.h) and
  // fails, saying so.
  IoResult Handshake();
  IoResult Read(void* into, size_t size);
  IoResult Write(const void* from, size_t size);
  // Writes from `count` buffers in order, as much as the socket takes. Under TLS, small
  // buffers are gathered into records of up to kGatherBytes; a call after kWant* must offer
  // the same leading bytes again (the caller's queue only grows at its end).
  IoResult WriteGather(const iovec* buffers, int count);
  // Bytes that arrived and are held above the socket: read them before waiting for an event.
  bool HasBufferedInput() const { return tls_ != nullptr && tls_->HasBufferedInput(); }
  // The peer's certificate subject under TLS; empty on a plain link.
  std::string PeerIdentity() const { return tls_ != nullptr ? tls_->PeerSubject() : ""; }

  static constexpr size_t kGatherBytes = 16 * 1024;

 private:
  ScopedFd fd_;
  std::unique_ptr<TlsSession> tls_;
  bool tls_server_ = false;
  bool first_byte_checked_ = false;  // a TLS acceptor looked at what its dialer speaks
};

// Secures a link: the TLS handshake (a plain link has none), then `exchange`. Call it again on
// the event a blocked result asks for. kDone once both are over (exchange.result() says whether
// the peer was accepted); else what blocked or failed, with `*stage` naming the step it stopped
// in ("TLS handshake" or "authentication").
IoResult DriveSecuring(Channel& channel, AuthExchange& exchange, const char** stage);

// Moves `exchange`'s bytes over `channel` until it finishes or the socket would block:
// kDone when the exchange is finished (its result() says how it went), kWantRead/kWantWrite to
// be called again on that event, kClosed or kError when the link failed first.
IoResult DriveExchange(Channel& channel, AuthExchange& exchange);

}  // namespace chorus::security

#endif  // CHORUS_CORE_SECURITY_CHANNEL_H_
