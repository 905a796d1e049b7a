// A hostile (or confused) TCP peer for the TCP transport's tests: raw connections to a rank's
// listening port that send arbitrary bytes, and the handshake bytes a real dialer without a job
// secret would send. The ranks attacked hold no secret either (security_test.cc covers those
// that do), so the challenge-response passes without one.
#ifndef CHORUS_TESTS_TRANSPORT_HOSTILE_PEER_H_
#define CHORUS_TESTS_TRANSPORT_HOSTILE_PEER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "chorus/transport/tcp/handshake.h"
#include "chorus/core/socket.h"

namespace chorus::testing {

// What one raw connection saw.
struct AttackOutcome {
  bool sent = false;  // connected and sent every byte
  // What the rank sent back: the authentication challenge it always sends first, its verdict
  // on the response, and `reply`: everything after those (the handshake Reply).
  std::string challenge;
  std::string auth_verdict;
  std::string reply;
  bool closed = false;  // the rank closed the connection (EOF or reset) within the wait
  int64_t elapsed_ms = 0;
  int local_port = 0;  // the attacker's port, as the rank logs it
};

// Connects to `target`, sends `bytes`, then reads until the rank closes the connection or
// `wait_for_close` passes; a zero wait closes the connection right after sending. Runs on any
// thread (no Catch2 assertions).
AttackOutcome Attack(const SocketAddress& target, const std::string& bytes,
                     absl::Duration wait_for_close = absl::Seconds(3));

// What a dialer without a job secret sends for `hello`: its authentication offer and response
// (which does not depend on the challenge when it carries no proof), then the 64 bytes of the
// Hello.
std::string HelloBytes(const tcp::Hello& hello);
// The bytes a rank without a secret sends before its Reply: the challenge and the verdict.
size_t AuthPreambleBytes();

// The verdict of a reply that is exactly one well-formed Reply; nullopt otherwise.
std::optional<tcp::HandshakeVerdict> VerdictOf(const AttackOutcome& outcome);

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_TRANSPORT_HOSTILE_PEER_H_
