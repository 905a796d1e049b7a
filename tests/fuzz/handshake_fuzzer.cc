// Fuzz target for the handshake codecs (transport/tcp/handshake.h): every input is given to
// DecodeHello (the bytes an unauthenticated dialer sends to a listening rank), DecodeReply (the
// bytes a dialer reads back) and ParsePublishedAddress (the text a rank reads from the store).
//
// Properties checked, beyond "no crash and no sanitizer report":
// - those of every fixed-size codec (fixed_size_codec.h) for Hello and Reply: nothing short is
//   accepted, nothing past the message is read, what is accepted re-encodes to the input;
// - an accepted Hello names 0 <= stream_index < stream_count <= kMaxStreams, an accepted
//   Reply a known verdict;
// - a parsed address survives FormatPublishedAddress -> ParsePublishedAddress unchanged.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "chorus/transport/tcp/handshake.h"
#include "tests/fuzz/fixed_size_codec.h"
#include "tests/fuzz/fuzz_check.h"

namespace chorus::tcp {
namespace {

void CheckHello(absl::Span<const uint8_t> input) {
  const std::optional<Hello> hello =
      testing::CheckFixedSizeCodec(input, kHelloSize, DecodeHello, EncodeHello);
  if (!hello) return;
  FUZZ_CHECK(hello->stream_count >= 1 && hello->stream_count <= kMaxStreams);
  FUZZ_CHECK(hello->stream_index < hello->stream_count);
}

void CheckReply(absl::Span<const uint8_t> input) {
  const std::optional<HandshakeVerdict> verdict =
      testing::CheckFixedSizeCodec(input, kReplySize, DecodeReply, EncodeReply);
  if (verdict) FUZZ_CHECK(static_cast<uint16_t>(*verdict) <= kMaxVerdict);
}

void CheckPublishedAddress(absl::string_view text) {
  const absl::StatusOr<PublishedAddress> published = ParsePublishedAddress(text);
  if (!published.ok()) return;
  FUZZ_CHECK(!published->socket_address.empty());
  FUZZ_CHECK(absl::StartsWith(text, published->socket_address));
  const absl::StatusOr<PublishedAddress> reparsed =
      ParsePublishedAddress(FormatPublishedAddress(*published));
  FUZZ_CHECK(reparsed.ok());
  FUZZ_CHECK(reparsed->socket_address == published->socket_address);
  FUZZ_CHECK(reparsed->mesh_id == published->mesh_id);
}

}  // namespace
}  // namespace chorus::tcp

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::Span<const uint8_t> input(data, size);
  chorus::tcp::CheckHello(input);
  chorus::tcp::CheckReply(input);
  chorus::tcp::CheckPublishedAddress(absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
