// The connection handshake and the address string a mesh publishes through the store. Pure
// functions over bytes and strings (no sockets, no state) so a fuzzer can target them.
//
// The dialer sends a Hello (64 bytes); the acceptor answers with a Reply (16 bytes) if the
// Hello was well formed, or closes the socket without a word if it was not. Data frames
// (wire_format.h) follow only an accepting Reply. All integers are little-endian.
//
// Hello:
//   0  u8[8] magic "CHORUSTC"
//   8  u16   protocol version (kProtocolVersion)
//   10 u16   reserved, 0
//   12 u32   stream index (0 = the connection's first socket)
//   16 u64   job id (from the bootstrap exchange)
//   24 u64   target mesh id (published by the target rank)
//   32 u64   source mesh id (published by the dialer; checked against the store's value)
//   40 u32   source rank
//   44 u32   target rank
//   48 u32   stream count the dialer will open
//   52 u32   reserved, 0
//   56 u64   dial id (random per dial; streams 1.. repeat the id of their stream 0)
// Reply:
//   0  u8[8] magic "CHORUSOK"
//   8  u16   protocol version
//   10 u16   verdict (HandshakeVerdict)
//   12 u32   reserved, 0
#ifndef CHORUS_TRANSPORT_TCP_HANDSHAKE_H_
#define CHORUS_TRANSPORT_TCP_HANDSHAKE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace chorus::tcp {

inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kHelloSize = 64;
inline constexpr size_t kReplySize = 16;
// Streams per connection a Hello may announce.
inline constexpr uint32_t kMaxStreams = 64;

struct Hello {
  uint32_t stream_index = 0;
  uint64_t job_id = 0;
  uint64_t target_mesh_id = 0;
  uint64_t source_mesh_id = 0;
  uint32_t source_rank = 0;
  uint32_t target_rank = 0;
  uint32_t stream_count = 1;
  uint64_t dial_id = 0;
};

std::array<uint8_t, kHelloSize> EncodeHello(const Hello& hello);

// Checks the magic, the version, the reserved fields and 0 <= stream_index < stream_count
// <= kMaxStreams. Which job, mesh and ranks are acceptable is the acceptor's check.
// `bytes` must hold at least kHelloSize bytes.
absl::StatusOr<Hello> DecodeHello(absl::Span<const uint8_t> bytes);

enum class HandshakeVerdict : uint16_t {
  kAccepted = 0,
  // Both ranks dialed each other at once; the lower rank's dial is kept. The dialer that gets
  // this waits for the peer's dial instead of retrying.
  kSimultaneousDial = 1,
  kWrongJob = 2,
  kUnknownMesh = 3,
  kWrongTargetRank = 4,
  kBadSourceRank = 5,
  kAlreadyConnected = 6,
  kClosed = 7,  // the target's mesh or connection is aborted, closed or failed
  kBadStream = 8,
};
inline constexpr uint16_t kMaxVerdict = 8;

absl::string_view VerdictName(HandshakeVerdict verdict);

std::array<uint8_t, kReplySize> EncodeReply(HandshakeVerdict verdict);
// `bytes` must hold at least kReplySize bytes.
absl::StatusOr<HandshakeVerdict> DecodeReply(absl::Span<const uint8_t> bytes);

// What a rank publishes through the bootstrap exchange: its device's socket address and the
// id of its mesh, "<host:port>;mesh=<16 hex digits>", e.g. "127.0.0.1:40123;mesh=00ab..." or
// "[::1]:40123;mesh=...".
struct PublishedAddress {
  std::string socket_address;
  uint64_t mesh_id = 0;
};

std::string FormatPublishedAddress(const PublishedAddress& published);
absl::StatusOr<PublishedAddress> ParsePublishedAddress(absl::string_view text);

}  // namespace chorus::tcp

#endif  // CHORUS_TRANSPORT_TCP_HANDSHAKE_H_
