// A hostile (or confused) TCP peer for the TCP transport's tests: raw connections to a rank's
// listening port that send arbitrary bytes, and the handshake bytes a real dialer would send.
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
  bool sent = false;    // connected and sent every byte
  std::string reply;    // what the rank sent back
  bool closed = false;  // the rank closed the connection (EOF or reset) within the wait
  int64_t elapsed_ms = 0;
  int local_port = 0;  // the attacker's port, as the rank logs it
};

// Connects to `target`, sends `bytes`, then reads until the rank closes the connection or
// `wait_for_close` passes; a zero wait closes the connection right after sending. Runs on any
// thread (no Catch2 assertions).
AttackOutcome Attack(const SocketAddress& target, const std::string& bytes,
                     absl::Duration wait_for_close = absl::Seconds(3));

// The 64 bytes a dialer sends for `hello`.
std::string HelloBytes(const tcp::Hello& hello);

// The verdict of a reply that is exactly one well-formed Reply; nullopt otherwise.
std::optional<tcp::HandshakeVerdict> VerdictOf(const AttackOutcome& outcome);

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_TRANSPORT_HOSTILE_PEER_H_
