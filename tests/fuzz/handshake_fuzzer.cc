// Fuzz target for the handshake codecs (transport/tcp/handshake.h): every input is given to
// DecodeHello (the bytes an unauthenticated dialer sends to a listening rank), DecodeReply (the
// bytes a dialer reads back) and ParseEndpoint (the text a rank reads from the store).
//
// Properties checked, beyond "no crash and no sanitizer report":
// - a decoder accepts nothing shorter than its message and reads only the message's bytes:
//   decoding the exact prefix gives the same verdict as decoding the whole input;
// - an accepted Hello or Reply re-encodes to exactly the bytes it was decoded from, so no
//   field (reserved bits, version, magic) is silently dropped or defaulted;
// - an accepted Hello names 0 <= stream_index < stream_count <= kMaxStreams, an accepted
//   Reply a known verdict;
// - a parsed endpoint survives FormatEndpoint -> ParseEndpoint unchanged.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "chorus/transport/tcp/handshake.h"
#include "tests/fuzz/fuzz_check.h"

namespace chorus::tcp {
namespace {

void CheckHello(absl::Span<const uint8_t> input) {
  const absl::StatusOr<Hello> hello = DecodeHello(input);
  if (input.size() < kHelloSize) {
    FUZZ_CHECK(!hello.ok());
    return;
  }
  FUZZ_CHECK(DecodeHello(input.first(kHelloSize)).ok() == hello.ok());
  if (!hello.ok()) return;
  FUZZ_CHECK(hello->stream_count >= 1 && hello->stream_count <= kMaxStreams);
  FUZZ_CHECK(hello->stream_index < hello->stream_count);
  const auto encoded = EncodeHello(*hello);
  FUZZ_CHECK(absl::MakeConstSpan(encoded) == input.first(kHelloSize));
}

void CheckReply(absl::Span<const uint8_t> input) {
  const absl::StatusOr<HandshakeVerdict> verdict = DecodeReply(input);
  if (input.size() < kReplySize) {
    FUZZ_CHECK(!verdict.ok());
    return;
  }
  FUZZ_CHECK(DecodeReply(input.first(kReplySize)).ok() == verdict.ok());
  if (!verdict.ok()) return;
  FUZZ_CHECK(static_cast<uint16_t>(*verdict) <= kMaxVerdict);
  const auto encoded = EncodeReply(*verdict);
  FUZZ_CHECK(absl::MakeConstSpan(encoded) == input.first(kReplySize));
}

void CheckEndpoint(absl::string_view text) {
  const absl::StatusOr<Endpoint> endpoint = ParseEndpoint(text);
  if (!endpoint.ok()) return;
  FUZZ_CHECK(!endpoint->socket_address.empty());
  FUZZ_CHECK(absl::StartsWith(text, endpoint->socket_address));
  const absl::StatusOr<Endpoint> reparsed = ParseEndpoint(FormatEndpoint(*endpoint));
  FUZZ_CHECK(reparsed.ok());
  FUZZ_CHECK(reparsed->socket_address == endpoint->socket_address);
  FUZZ_CHECK(reparsed->mesh_id == endpoint->mesh_id);
}

}  // namespace
}  // namespace chorus::tcp

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::Span<const uint8_t> input(data, size);
  chorus::tcp::CheckHello(input);
  chorus::tcp::CheckReply(input);
  chorus::tcp::CheckEndpoint(absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
