#include "chorus/transport/tcp/handshake.h"

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "chorus/core/status.h"
#include "chorus/core/byte_order.h"

namespace chorus::tcp {
namespace {

constexpr char kHelloMagic[8] = {'C', 'H', 'O', 'R', 'U', 'S', 'T', 'C'};
constexpr char kReplyMagic[8] = {'C', 'H', 'O', 'R', 'U', 'S', 'O', 'K'};
constexpr absl::string_view kMeshField = ";mesh=";

}  // namespace

std::array<uint8_t, kHelloSize> EncodeHello(const Hello& hello) {
  std::array<uint8_t, kHelloSize> out{};
  std::memcpy(&out[0], kHelloMagic, sizeof(kHelloMagic));
  StoreLittleEndian<uint16_t>(&out[8], kProtocolVersion);
  StoreLittleEndian<uint32_t>(&out[12], hello.stream_index);
  StoreLittleEndian<uint64_t>(&out[16], hello.job_id);
  StoreLittleEndian<uint64_t>(&out[24], hello.target_mesh_id);
  StoreLittleEndian<uint64_t>(&out[32], hello.source_mesh_id);
  StoreLittleEndian<uint32_t>(&out[40], hello.source_rank);
  StoreLittleEndian<uint32_t>(&out[44], hello.target_rank);
  StoreLittleEndian<uint32_t>(&out[48], hello.stream_count);
  StoreLittleEndian<uint64_t>(&out[56], hello.dial_id);
  return out;
}

absl::StatusOr<Hello> DecodeHello(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < kHelloSize) {
    return InvalidArgumentError(
        absl::StrCat("handshake truncated: ", bytes.size(), " of ", kHelloSize, " bytes"));
  }
  const uint8_t* in = bytes.data();
  if (std::memcmp(in, kHelloMagic, sizeof(kHelloMagic)) != 0) {
    return InvalidArgumentError("handshake has a bad magic (not a Chorus TCP peer)");
  }
  const uint16_t version = LoadLittleEndian<uint16_t>(&in[8]);
  if (version != kProtocolVersion) {
    return InvalidArgumentError(absl::StrCat("handshake has protocol version ", version,
                                             "; this build speaks ", kProtocolVersion));
  }
  if (LoadLittleEndian<uint16_t>(&in[10]) != 0 || LoadLittleEndian<uint32_t>(&in[52]) != 0) {
    return InvalidArgumentError("handshake has non-zero reserved fields");
  }
  Hello hello;
  hello.stream_index = LoadLittleEndian<uint32_t>(&in[12]);
  hello.job_id = LoadLittleEndian<uint64_t>(&in[16]);
  hello.target_mesh_id = LoadLittleEndian<uint64_t>(&in[24]);
  hello.source_mesh_id = LoadLittleEndian<uint64_t>(&in[32]);
  hello.source_rank = LoadLittleEndian<uint32_t>(&in[40]);
  hello.target_rank = LoadLittleEndian<uint32_t>(&in[44]);
  hello.stream_count = LoadLittleEndian<uint32_t>(&in[48]);
  hello.dial_id = LoadLittleEndian<uint64_t>(&in[56]);
  if (hello.stream_count == 0 || hello.stream_count > kMaxStreams ||
      hello.stream_index >= hello.stream_count) {
    return InvalidArgumentError(absl::StrCat("handshake names stream ", hello.stream_index, " of ",
                                             hello.stream_count, " (at most ", kMaxStreams,
                                             " streams)"));
  }
  return hello;
}

absl::string_view VerdictName(HandshakeVerdict verdict) {
  switch (verdict) {
    case HandshakeVerdict::kAccepted:
      return "accepted";
    case HandshakeVerdict::kSimultaneousDial:
      return "simultaneous dial, the lower rank's connection is kept";
    case HandshakeVerdict::kWrongJob:
      return "wrong job id (a process of another job?)";
    case HandshakeVerdict::kUnknownMesh:
      return "unknown mesh (stale address, or the mesh was destroyed)";
    case HandshakeVerdict::kWrongTargetRank:
      return "wrong target rank";
    case HandshakeVerdict::kBadSourceRank:
      return "source rank out of range";
    case HandshakeVerdict::kAlreadyConnected:
      return "already connected";
    case HandshakeVerdict::kClosed:
      return "mesh or connection closed";
    case HandshakeVerdict::kBadStream:
      return "stream does not belong to an accepted connection";
  }
  return "unknown verdict";
}

std::array<uint8_t, kReplySize> EncodeReply(HandshakeVerdict verdict) {
  std::array<uint8_t, kReplySize> out{};
  std::memcpy(&out[0], kReplyMagic, sizeof(kReplyMagic));
  StoreLittleEndian<uint16_t>(&out[8], kProtocolVersion);
  StoreLittleEndian<uint16_t>(&out[10], static_cast<uint16_t>(verdict));
  return out;
}

absl::StatusOr<HandshakeVerdict> DecodeReply(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < kReplySize) {
    return InvalidArgumentError(
        absl::StrCat("handshake reply truncated: ", bytes.size(), " of ", kReplySize, " bytes"));
  }
  const uint8_t* in = bytes.data();
  if (std::memcmp(in, kReplyMagic, sizeof(kReplyMagic)) != 0) {
    return InvalidArgumentError("handshake reply has a bad magic");
  }
  const uint16_t version = LoadLittleEndian<uint16_t>(&in[8]);
  if (version != kProtocolVersion) {
    return InvalidArgumentError(absl::StrCat("handshake reply has protocol version ", version,
                                             "; this build speaks ", kProtocolVersion));
  }
  const uint16_t verdict = LoadLittleEndian<uint16_t>(&in[10]);
  if (verdict > kMaxVerdict || LoadLittleEndian<uint32_t>(&in[12]) != 0) {
    return InvalidArgumentError(absl::StrCat("handshake reply has unknown verdict ", verdict));
  }
  return static_cast<HandshakeVerdict>(verdict);
}

std::string FormatPublishedAddress(const PublishedAddress& published) {
  return absl::StrCat(published.socket_address, kMeshField,
                      absl::StrFormat("%016x", published.mesh_id));
}

absl::StatusOr<PublishedAddress> ParsePublishedAddress(absl::string_view text) {
  const size_t field = text.rfind(kMeshField);
  PublishedAddress published;
  if (field == absl::string_view::npos || field == 0 ||
      !absl::SimpleHexAtoi(text.substr(field + kMeshField.size()), &published.mesh_id)) {
    return InvalidArgumentError(absl::StrCat(
        "'", text, "' is not a published TCP address of the form <host:port>;mesh=<hex id>"));
  }
  published.socket_address = std::string(text.substr(0, field));
  return published;
}

}  // namespace chorus::tcp
