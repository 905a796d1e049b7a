#include "chorus/transport/tcp/acceptor.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "chorus/core/logging.h"
#include "chorus/transport/tcp/tcp_mesh.h"

namespace chorus::tcp {
namespace {

// Accepted sockets may wait for their handshake at once; more are refused at the door, so a
// flood of idle connections cannot exhaust the process's file descriptors.
constexpr size_t kMaxPendingHandshakes = 256;
// After accept() fails for lack of descriptors or memory, try again this much later.
constexpr absl::Duration kAcceptPause = absl::Milliseconds(100);

using security::IoResult;

// Whether the dialer ended the connection: closed it, or reset it (a dialer that closes a socket
// with bytes of ours still unread resets it, and our next write then fails with EPIPE).
bool EndedByDialer(const IoResult& result) {
  return result.kind == IoResult::Kind::kClosed ||
         (result.kind == IoResult::Kind::kError &&
          (result.error_number == ECONNRESET || result.error_number == EPIPE));
}

}  // namespace

class Acceptor::Handshake : public EventHandler {
 public:
  Handshake(Acceptor* acceptor, security::Channel channel, std::string remote, Deadline deadline)
      : acceptor(acceptor),
        channel(std::move(channel)),
        remote(std::move(remote)),
        deadline(deadline),
        auth(security::AuthExchange::Role::kAcceptor,
             acceptor->context_->options.security.auth_key(), security::kTransportLinkLabel) {
    // The challenge goes first, unless TLS has to shake hands before it.
    token = acceptor->engine_.Register(this->channel.fd(), EPOLLOUT, this);
  }
  ~Handshake() override { Close(); }
  void OnEvents(uint32_t) override { acceptor->OnHandshakeEvents(*this); }
  void Close() {
    if (token != 0) acceptor->engine_.Unregister(token, channel.fd());
    token = 0;
    channel.Close();
  }
  void Want(uint32_t events) {
    if (events != interest) acceptor->engine_.SetInterest(token, channel.fd(), events);
    interest = events;
  }

  Acceptor* const acceptor;
  security::Channel channel;
  const std::string remote;
  const Deadline deadline;
  uint64_t token = 0;
  uint32_t interest = EPOLLOUT;
  bool secured = false;  // the TLS handshake and the challenge-response are done
  security::AuthExchange auth;
  std::array<uint8_t, kHelloSize> bytes{};
  size_t received = 0;
  bool parked = false;  // a complete Hello waiting for its mesh to become ready
  Hello hello;
};

Acceptor::Acceptor(DeviceState* context, ScopedFd listener)
    : context_(context), engine_(*context->engine), listener_(std::move(listener)) {
  token_ = engine_.Register(listener_.get(), EPOLLIN, this);
  engine_.AddTickable(this);
}

Acceptor::~Acceptor() {
  engine_.RemoveTickable(this);
  engine_.Unregister(token_, listener_.get());
  pending_.clear();
}

void Acceptor::PauseAccepting() {
  engine_.SetInterest(token_, listener_.get(), 0);
  accept_paused_ = true;
  accept_paused_until_ = Deadline::After(kAcceptPause);
  engine_.RequestTick();
}

void Acceptor::OnEvents(uint32_t) {
  while (true) {
    sockaddr_storage remote{};
    socklen_t length = sizeof(remote);
    ScopedFd fd(accept4(listener_.get(), reinterpret_cast<sockaddr*>(&remote), &length,
                        SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      CHORUS_LOG(kWarn, "tcp") << "accept on " << context_->listen_address.ToString()
                               << " failed: " << ErrnoText(errno) << "; pausing for "
                               << kAcceptPause;
      PauseAccepting();
      return;
    }
    const std::string address =
        SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&remote), length).ToString();
    if (pending_.size() >= kMaxPendingHandshakes) {
      CHORUS_LOG(kWarn, "tcp") << "refused connection from " << address << ": " << pending_.size()
                               << " connections are already awaiting their "
                               << "handshake";
      continue;
    }
    // Buffer sizes are inherited from the listener; TCP_NODELAY is set again to be sure.
    (void)ConfigureStreamSocket(fd.get(), 0);
    absl::StatusOr<security::Channel> channel =
        security::Channel::Open(std::move(fd), context_->options.security.tls.get(),
                                security::TlsContext::Role::kServer);
    if (!channel.ok()) {
      CHORUS_LOG(kWarn, "tcp") << "refused connection from " << address << ": "
                               << channel.status().message();
      continue;
    }
    pending_.push_back(std::make_unique<Handshake>(
        this, *std::move(channel), address, Deadline::After(context_->options.handshake_timeout)));
    engine_.RequestTick();
  }
}

void Acceptor::OnHandshakeEvents(Handshake& handshake) {
  if (handshake.parked) {
    // Only a hang-up can be reported while parked (no read interest).
    CHORUS_LOG(kInfo, "tcp") << "connection from " << handshake.remote
                             << " closed while its mesh was being set up";
    Drop(handshake);
    return;
  }
  if (!handshake.secured && !Secure(handshake)) return;
  ReadHello(handshake);
}

bool Acceptor::StepStopped(Handshake& handshake, const IoResult& result, absl::string_view step) {
  if (result.done()) return false;
  if (result.blocked()) {
    handshake.Want(result.kind == IoResult::Kind::kWantWrite ? EPOLLOUT : EPOLLIN);
    return true;
  }
  if (EndedByDialer(result) && step == "authentication") {
    // Ended by the dialer, with nothing wrong in what it sent: an abandoned dial (the other
    // side of a simultaneous dial, dropped at whatever step it had reached), a port probe, or
    // a dialer that refused our TLS certificate (it logs why).
    CHORUS_LOG(kInfo, "tcp") << "connection from " << handshake.remote
                             << " ended during the authentication";
  } else {
    // Errors name their call ("recv: ...", "TLS handshake: ...").
    CHORUS_LOG(kWarn, "tcp") << "refused connection from " << handshake.remote << ": "
                             << (result.kind == IoResult::Kind::kClosed
                                     ? absl::StrCat(step, ": the peer closed the connection")
                                     : result.error);
    handshake.channel.DiscardInput();
  }
  Drop(handshake);
  return true;
}

bool Acceptor::Secure(Handshake& handshake) {
  // Read `stage` only once DriveSecuring has set it (argument order is unspecified).
  const char* stage = nullptr;
  const IoResult secured = security::DriveSecuring(handshake.channel, handshake.auth, &stage);
  if (StepStopped(handshake, secured, stage)) return false;
  if (!handshake.auth.result().ok()) {
    CHORUS_LOG(kWarn, "tcp") << "refused connection from " << handshake.remote << ": "
                             << handshake.auth.result().message();
    handshake.channel.DiscardInput();
    Drop(handshake);
    return false;
  }
  handshake.secured = true;
  handshake.Want(EPOLLIN);
  return true;
}

void Acceptor::ReadHello(Handshake& handshake) {
  while (handshake.received < kHelloSize) {
    const IoResult got = handshake.channel.Read(handshake.bytes.data() + handshake.received,
                                                kHelloSize - handshake.received);
    if (got.done()) {
      handshake.received += got.bytes;
      continue;
    }
    if (got.blocked()) {
      handshake.Want(got.kind == IoResult::Kind::kWantWrite ? EPOLLOUT : EPOLLIN);
      return;
    }
    if (EndedByDialer(got) && handshake.received == 0) {
      // A dial abandoned once the peer's own dial was accepted (crossing dials).
      CHORUS_LOG(kInfo, "tcp") << "connection from " << handshake.remote
                               << " ended before its hello"
                               << (got.kind == IoResult::Kind::kError
                                       ? absl::StrCat(" (", got.error, ")")
                                       : "");
    } else {
      CHORUS_LOG(kWarn, "tcp") << "refused connection from " << handshake.remote
                               << ": handshake truncated at " << handshake.received << " of "
                               << kHelloSize << " bytes"
                               << (got.kind == IoResult::Kind::kError
                                       ? absl::StrCat(" (", got.error, ")")
                                       : "");
    }
    Drop(handshake);
    return;
  }
  OnHello(handshake);
}

void Acceptor::OnHello(Handshake& handshake) {
  absl::StatusOr<Hello> hello = DecodeHello(handshake.bytes);
  if (!hello.ok()) {
    CHORUS_LOG(kWarn, "tcp") << "refused connection from " << handshake.remote << ": "
                             << hello.status().message();
    Drop(handshake);
    return;
  }
  handshake.hello = *hello;
  const auto it = context_->meshes.find(hello->target_mesh_id);
  if (it == context_->meshes.end()) {
    const auto reply = EncodeReply(HandshakeVerdict::kUnknownMesh);
    (void)handshake.channel.Write(reply.data(), reply.size());
    CHORUS_LOG(kWarn, "tcp") << "refused connection from " << handshake.remote
                             << " claiming to be rank " << hello->source_rank
                             << ": no mesh with id "
                             << absl::StrCat(absl::Hex(hello->target_mesh_id))
                             << " here (stale address, or another job)";
    Drop(handshake);
    return;
  }
  if (!it->second->ready()) {
    handshake.parked = true;
    handshake.Want(0);
    return;
  }
  Decide(handshake, *it->second);
}

void Acceptor::Decide(Handshake& handshake, TcpMesh& mesh) {
  const Hello& hello = handshake.hello;
  const HandshakeVerdict verdict = mesh.EvaluateHello(hello);
  const auto reply = EncodeReply(verdict);
  // A fresh socket's send buffer always has room for the reply (one record under TLS).
  const IoResult sent = handshake.channel.Write(reply.data(), reply.size());
  if (verdict == HandshakeVerdict::kAccepted && sent.done() && sent.bytes == reply.size()) {
    CHORUS_LOG(kDebug, "tcp") << "accepted stream " << hello.stream_index << " from rank "
                              << hello.source_rank << " at " << handshake.remote;
    engine_.Unregister(handshake.token, handshake.channel.fd());
    handshake.token = 0;
    security::Channel channel = std::move(handshake.channel);
    Drop(handshake);
    mesh.AdoptStream(hello, std::move(channel));
    return;
  }
  if (verdict == HandshakeVerdict::kSimultaneousDial ||
      verdict == HandshakeVerdict::kAlreadyConnected) {
    // A genuine peer of this mesh whose dial crossed ours; not an attack.
    CHORUS_LOG(kDebug, "tcp") << "declined the dial of rank " << hello.source_rank << ": "
                              << VerdictName(verdict);
  } else {
    CHORUS_LOG(kWarn, "tcp") << "refused connection from " << handshake.remote
                             << " claiming to be rank " << hello.source_rank << " of job "
                             << absl::StrCat(absl::Hex(hello.job_id)) << " for rank "
                             << hello.target_rank << ": "
                             << (verdict == HandshakeVerdict::kAccepted
                                     ? "the handshake reply could not be sent"
                                     : VerdictName(verdict));
  }
  Drop(handshake);
}

void Acceptor::Drop(Handshake& handshake) {
  handshake.Close();
  const auto it = std::find_if(pending_.begin(), pending_.end(),
                               [&](const auto& pending) { return pending.get() == &handshake; });
  if (it == pending_.end()) return;
  engine_.Retire(std::move(*it));
  pending_.erase(it);
}

void Acceptor::MeshReady(uint64_t mesh_id) {
  std::vector<Handshake*> parked;
  for (const auto& handshake : pending_) {
    if (handshake->parked && handshake->hello.target_mesh_id == mesh_id) {
      parked.push_back(handshake.get());
    }
  }
  const auto it = context_->meshes.find(mesh_id);
  if (it == context_->meshes.end()) return;
  for (Handshake* handshake : parked) {
    handshake->parked = false;
    Decide(*handshake, *it->second);
  }
}

absl::Duration Acceptor::Tick() {
  if (accept_paused_ && accept_paused_until_.Expired()) {
    accept_paused_ = false;
    engine_.SetInterest(token_, listener_.get(), EPOLLIN);
  }
  std::vector<Handshake*> expired;
  for (const auto& handshake : pending_) {
    if (handshake->deadline.Expired()) expired.push_back(handshake.get());
  }
  for (Handshake* handshake : expired) {
    CHORUS_LOG(kWarn, "tcp") << "refused connection from " << handshake->remote
                             << ": no complete handshake within "
                             << context_->options.handshake_timeout
                             << (handshake->parked ? " (its mesh never became ready)" : "");
    Drop(*handshake);
  }
  return pending_.empty() && !accept_paused_ ? absl::InfiniteDuration()
                                             : ProgressEngine::kTickInterval;
}

}  // namespace chorus::tcp
