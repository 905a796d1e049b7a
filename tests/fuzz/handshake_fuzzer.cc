// Fuzz target for the handshake codecs (transport/tcp/handshake.h) and the link authentication
// before them (core/security/auth_exchange.h): every input is given to DecodeHello (the bytes an
// unauthenticated dialer sends to a listening rank), DecodeReply (the bytes a dialer reads
// back), ParsePublishedAddress (the text a rank reads from the store), the four authentication
// codecs, and to both ends of an authentication exchange as what the other end sent.
//
// Properties checked, beyond "no crash and no sanitizer report":
// - those of every fixed-size codec (fixed_size_codec.h) for Hello and Reply: nothing short is
//   accepted, nothing past the message is read, what is accepted re-encodes to the input;
// - an accepted Hello names 0 <= stream_index < stream_count <= kMaxStreams, an accepted
//   Reply a known verdict;
// - a parsed address survives FormatPublishedAddress -> ParsePublishedAddress unchanged;
// - an end holding the secret never accepts input it did not see proven (the input cannot
//   know the fresh nonce the proof must cover); an end without one accepts exactly a
//   well-formed exchange without proofs.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "chorus/core/security/auth_exchange.h"
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

void CheckAuthCodecs(absl::Span<const uint8_t> input) {
  using namespace security;
  testing::CheckFixedSizeCodec(
      input, kOfferBytes,
      [](absl::Span<const uint8_t> bytes) -> absl::StatusOr<int> {
        const absl::Status offer = DecodeOffer(bytes);
        if (!offer.ok()) return offer;
        return 0;
      },
      [](int) { return EncodeOffer(); });
  testing::CheckFixedSizeCodec(input, kChallengeBytes, DecodeChallenge, EncodeChallenge);
  testing::CheckFixedSizeCodec(input, kResponseBytes, DecodeResponse, EncodeResponse);
  const std::optional<Verdict> verdict =
      testing::CheckFixedSizeCodec(input, kVerdictBytes, DecodeVerdict, EncodeVerdict);
  if (verdict) FUZZ_CHECK(static_cast<uint16_t>(verdict->verdict) <= kMaxAuthVerdict);
}

// Feeds `input` to `exchange` as everything its peer sends, answering nothing back but taking
// its output as sent. Returns whether the exchange finished and accepted.
bool FeedExchange(security::AuthExchange& exchange, absl::Span<const uint8_t> input) {
  size_t used = 0;
  for (int step = 0; step < 8 && !exchange.finished(); ++step) {
    if (!exchange.output().empty()) {
      exchange.OutputSent(exchange.output().size());
      continue;
    }
    const absl::Span<uint8_t> room = exchange.input();
    if (room.empty() || used == input.size()) break;
    const size_t count = std::min(room.size(), input.size() - used);
    std::memcpy(room.data(), input.data() + used, count);
    exchange.InputReceived(count);
    used += count;
  }
  return exchange.finished() && exchange.result().ok();
}

void CheckAuthExchange(absl::Span<const uint8_t> input) {
  using security::AuthExchange;
  const security::AuthKey key{"the-fuzzed-job-secret", "fuzz"};
  for (const security::AuthKey* held : {&key, static_cast<const security::AuthKey*>(nullptr)}) {
    AuthExchange acceptor(AuthExchange::Role::kAcceptor, held, "fuzz");
    const bool acceptor_accepted = FeedExchange(acceptor, input);
    AuthExchange dialer(AuthExchange::Role::kDialer, held, "fuzz");
    const bool dialer_accepted = FeedExchange(dialer, input);
    if (held != nullptr) {
      FUZZ_CHECK(!acceptor_accepted);
      FUZZ_CHECK(!dialer_accepted);
      continue;
    }
    // Without secrets: an offer then a response without proof is all an acceptor needs.
    const bool well_formed =
        input.size() >= security::kOfferBytes + security::kResponseBytes &&
        security::DecodeOffer(input.first(security::kOfferBytes)).ok() &&
        security::DecodeResponse(input.subspan(security::kOfferBytes, security::kResponseBytes))
            .ok();
    FUZZ_CHECK(acceptor_accepted == (well_formed && !security::DecodeResponse(input.subspan(
                                                          security::kOfferBytes,
                                                          security::kResponseBytes))
                                                          ->has_proof));
  }
}

}  // namespace
}  // namespace chorus::tcp

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::Span<const uint8_t> input(data, size);
  chorus::tcp::CheckHello(input);
  chorus::tcp::CheckReply(input);
  chorus::tcp::CheckAuthCodecs(input);
  chorus::tcp::CheckAuthExchange(input);
  chorus::tcp::CheckPublishedAddress(absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
