// The frame header that precedes every piece of message data on a TCP stream. Pure functions
// over bytes (no sockets, no state) so a fuzzer can drive the decoder directly.
//
// A message is sent as one kStart frame on stream 0, optionally followed by kChunk frames on
// the other streams of the connection (striping). kStart carries the tag and the message's
// total length and announces the message: the receiver matches it to a posted receive in
// stream-0 order, which is the order the sender posted its sends. kChunk frames carry only
// (seq, offset, length) and land in the message announced with that seq.
//
// Layout, 48 bytes, all integers little-endian:
//   0  u32 kind          1 = kStart, 2 = kChunk
//   4  u32 reserved      0
//   8  u64 seq           per-connection message number, strictly increasing per sender
//   16 u64 tag           kStart: the message tag; kChunk: 0
//   24 u64 total_length  the whole message's length
//   32 u64 offset        where this frame's payload goes in the message (kStart: 0)
//   40 u64 length        payload bytes that follow this header
#ifndef CHORUS_TRANSPORT_TCP_WIRE_FORMAT_H_
#define CHORUS_TRANSPORT_TCP_WIRE_FORMAT_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace chorus::tcp {

enum class FrameKind : uint32_t { kStart = 1, kChunk = 2 };

struct FrameHeader {
  FrameKind kind = FrameKind::kStart;
  uint64_t seq = 0;
  uint64_t tag = 0;
  uint64_t total_length = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

inline constexpr size_t kFrameHeaderSize = 48;
using EncodedFrameHeader = std::array<uint8_t, kFrameHeaderSize>;

EncodedFrameHeader EncodeFrameHeader(const FrameHeader& header);

// Decodes and validates the structure of a header: known kind, zero reserved bits, the frame
// inside its message (offset + length <= total_length, no overflow), kStart at offset 0,
// kChunk with tag 0, and total_length <= max_message_bytes. `bytes` must hold at least
// kFrameHeaderSize bytes; only the first kFrameHeaderSize are read. InvalidArgument with a
// description otherwise. Whether the frame fits the connection's state (a known seq, a posted
// buffer) is the connection's check, not this function's.
absl::StatusOr<FrameHeader> DecodeFrameHeader(absl::Span<const uint8_t> bytes,
                                              uint64_t max_message_bytes);

}  // namespace chorus::tcp

#endif  // CHORUS_TRANSPORT_TCP_WIRE_FORMAT_H_
