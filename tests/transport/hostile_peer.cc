#include "tests/transport/hostile_peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>

#include "absl/strings/match.h"
#include "absl/types/span.h"
#include "chorus/core/security/auth_exchange.h"

namespace chorus::testing {

AttackOutcome Attack(const SocketAddress& target, const std::string& bytes,
                     absl::Duration wait_for_close) {
  AttackOutcome outcome;
  ScopedFd fd(socket(target.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  const timeval timeout = absl::ToTimeval(wait_for_close);
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (connect(fd.get(), target.sockaddr_ptr(), target.length()) != 0) return outcome;
  sockaddr_in local{};
  socklen_t length = sizeof(local);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &length);
  outcome.local_port = ntohs(local.sin_port);
  const absl::Time start = absl::Now();
  outcome.sent = bytes.empty() || send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
                                      static_cast<ssize_t>(bytes.size());
  // SO_RCVTIMEO of zero would mean "block forever".
  if (wait_for_close <= absl::ZeroDuration()) return outcome;
  char buffer[256];
  while (true) {
    const ssize_t got = recv(fd.get(), buffer, sizeof(buffer), 0);
    if (got > 0) {
      outcome.reply.append(buffer, static_cast<size_t>(got));
      continue;
    }
    outcome.closed = got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    break;
  }
  outcome.elapsed_ms = absl::ToInt64Milliseconds(absl::Now() - start);
  // Split off the authentication messages the rank sent first.
  const std::pair<std::string*, size_t> parts[] = {
      {&outcome.challenge, security::kChallengeBytes},
      {&outcome.auth_verdict, security::kVerdictBytes}};
  const char* magics[] = {"CHORUSCH", "CHORUSAV"};
  for (int i = 0; i < 2; ++i) {
    if (outcome.reply.size() < parts[i].second || !absl::StartsWith(outcome.reply, magics[i])) {
      break;
    }
    *parts[i].first = outcome.reply.substr(0, parts[i].second);
    outcome.reply.erase(0, parts[i].second);
  }
  return outcome;
}

std::string HelloBytes(const tcp::Hello& hello) {
  const auto offer = security::EncodeOffer();
  security::Response response;
  response.nonce = security::RandomNonce();
  const auto auth = security::EncodeResponse(response);
  const auto bytes = tcp::EncodeHello(hello);
  return std::string(offer.begin(), offer.end()) + std::string(auth.begin(), auth.end()) +
         std::string(bytes.begin(), bytes.end());
}

size_t AuthPreambleBytes() { return security::kChallengeBytes + security::kVerdictBytes; }

std::optional<tcp::HandshakeVerdict> VerdictOf(const AttackOutcome& outcome) {
  if (outcome.reply.size() != tcp::kReplySize) return std::nullopt;
  auto verdict = tcp::DecodeReply(absl::MakeConstSpan(
      reinterpret_cast<const uint8_t*>(outcome.reply.data()), outcome.reply.size()));
  return verdict.ok() ? std::optional<tcp::HandshakeVerdict>(*verdict) : std::nullopt;
}

}  // namespace chorus::testing
