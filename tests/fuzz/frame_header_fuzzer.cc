// Fuzz target for the frame-header decoder (transport/tcp/wire_format.h), which parses every
// 48 bytes a connected peer announces before any buffer is allocated or written.
//
// Input: the 48-byte header, then optionally 8 little-endian bytes giving the receiver's
// max_message_bytes (CHORUS_TCP_MAX_MESSAGE), so the fuzzer explores the limit too; without
// them the default of 4 GiB applies.
//
// Properties checked, beyond "no crash and no sanitizer report":
// - those of every fixed-size codec (fixed_size_codec.h): nothing shorter than a header is
//   accepted, nothing past it is read, an accepted header re-encodes to the input's 48 bytes;
// - an accepted header lies inside its message (offset + length <= total_length, computed
//   without overflow), its message inside the limit, kStart at offset 0, kChunk without a tag;
// - the limit only ever rejects: a header is accepted under a limit iff it is accepted without
//   one and its total_length fits the limit.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>

#include "absl/numeric/int128.h"
#include "absl/types/span.h"
#include "chorus/core/byte_order.h"
#include "chorus/transport/tcp/wire_format.h"
#include "tests/fuzz/fixed_size_codec.h"
#include "tests/fuzz/fuzz_check.h"

namespace chorus::tcp {
namespace {

constexpr uint64_t kDefaultMaxMessageBytes = uint64_t{4} << 30;
constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();

void CheckFrameHeader(absl::Span<const uint8_t> input) {
  uint64_t max_message_bytes = kDefaultMaxMessageBytes;
  if (input.size() >= kFrameHeaderSize + sizeof(uint64_t)) {
    max_message_bytes = LoadLittleEndian<uint64_t>(&input[kFrameHeaderSize]);
  }
  const auto decode = [max_message_bytes](absl::Span<const uint8_t> bytes) {
    return DecodeFrameHeader(bytes, max_message_bytes);
  };
  const std::optional<FrameHeader> header =
      testing::CheckFixedSizeCodec(input, kFrameHeaderSize, decode, EncodeFrameHeader);
  if (input.size() < kFrameHeaderSize) return;
  const absl::StatusOr<FrameHeader> unlimited = DecodeFrameHeader(input, kNoLimit);
  FUZZ_CHECK(header.has_value() ==
             (unlimited.ok() && unlimited->total_length <= max_message_bytes));
  if (!header) return;

  FUZZ_CHECK(header->kind == FrameKind::kStart || header->kind == FrameKind::kChunk);
  FUZZ_CHECK(header->total_length <= max_message_bytes);
  FUZZ_CHECK(absl::uint128(header->offset) + header->length <= header->total_length);
  if (header->kind == FrameKind::kStart) FUZZ_CHECK(header->offset == 0);
  if (header->kind == FrameKind::kChunk) FUZZ_CHECK(header->tag == 0);
}

}  // namespace
}  // namespace chorus::tcp

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  chorus::tcp::CheckFrameHeader(absl::Span<const uint8_t>(data, size));
  return 0;
}
