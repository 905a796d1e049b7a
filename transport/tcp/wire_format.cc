#include "chorus/transport/tcp/wire_format.h"

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "chorus/core/byte_order.h"

namespace chorus::tcp {

EncodedFrameHeader EncodeFrameHeader(const FrameHeader& header) {
  EncodedFrameHeader out{};
  StoreLittleEndian<uint32_t>(&out[0], static_cast<uint32_t>(header.kind));
  StoreLittleEndian<uint32_t>(&out[4], 0);
  StoreLittleEndian<uint64_t>(&out[8], header.seq);
  StoreLittleEndian<uint64_t>(&out[16], header.tag);
  StoreLittleEndian<uint64_t>(&out[24], header.total_length);
  StoreLittleEndian<uint64_t>(&out[32], header.offset);
  StoreLittleEndian<uint64_t>(&out[40], header.length);
  return out;
}

absl::StatusOr<FrameHeader> DecodeFrameHeader(absl::Span<const uint8_t> bytes,
                                              uint64_t max_message_bytes) {
  if (bytes.size() < kFrameHeaderSize) {
    return InvalidArgumentError(
        absl::StrCat("frame header truncated: ", bytes.size(), " of ", kFrameHeaderSize, " bytes"));
  }
  const uint8_t* in = bytes.data();
  const uint32_t kind = LoadLittleEndian<uint32_t>(&in[0]);
  const uint32_t reserved = LoadLittleEndian<uint32_t>(&in[4]);
  FrameHeader header;
  header.seq = LoadLittleEndian<uint64_t>(&in[8]);
  header.tag = LoadLittleEndian<uint64_t>(&in[16]);
  header.total_length = LoadLittleEndian<uint64_t>(&in[24]);
  header.offset = LoadLittleEndian<uint64_t>(&in[32]);
  header.length = LoadLittleEndian<uint64_t>(&in[40]);
  if (kind != static_cast<uint32_t>(FrameKind::kStart) &&
      kind != static_cast<uint32_t>(FrameKind::kChunk)) {
    return InvalidArgumentError(absl::StrCat("unknown frame kind ", kind));
  }
  header.kind = static_cast<FrameKind>(kind);
  if (reserved != 0) {
    return InvalidArgumentError(absl::StrCat("frame reserved field is ", reserved, ", not 0"));
  }
  if (header.total_length > max_message_bytes) {
    return InvalidArgumentError(absl::StrCat("message of ", header.total_length,
                                             " bytes exceeds the maximum of ", max_message_bytes,
                                             " (CHORUS_TCP_MAX_MESSAGE)"));
  }
  if (header.offset > header.total_length || header.length > header.total_length - header.offset) {
    return InvalidArgumentError(absl::StrCat("frame [", header.offset, ", +", header.length,
                                             ") lies outside its message of ", header.total_length,
                                             " bytes"));
  }
  if (header.kind == FrameKind::kStart && header.offset != 0) {
    return InvalidArgumentError(absl::StrCat("start frame at offset ", header.offset));
  }
  if (header.kind == FrameKind::kChunk && header.tag != 0) {
    return InvalidArgumentError("chunk frame carries a tag");
  }
  return header;
}

}  // namespace chorus::tcp
