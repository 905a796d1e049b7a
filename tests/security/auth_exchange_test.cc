// The job-secret challenge-response (core/security/auth_exchange.h), both ends in memory: who
// is accepted, what each side is told when not, and that a recorded exchange cannot be replayed.
#include "chorus/core/security/auth_exchange.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace chorus::security {
namespace {

using Role = AuthExchange::Role;

const AuthKey kSecret{"0123456789abcdef-the-job-secret", "CHORUS_AUTH_KEY"};
const AuthKey kOtherSecret{"another-job-secret-0123456789", "CHORUS_AUTH_KEY"};
constexpr absl::string_view kLabel = "chorus-test-link";

// Moves bytes between the two ends until neither has anything to send (bounded: the exchange
// is four messages). `tamper`, if set, may change each message in flight. An end that fails
// stops sending, so the other may be left waiting, as it would be until the socket closes.
void Exchange(AuthExchange& dialer, AuthExchange& acceptor,
              void (*tamper)(std::vector<uint8_t>&) = nullptr) {
  bool moved = true;
  for (int step = 0; step < 16 && moved; ++step) {
    moved = false;
    for (auto [from, to] : {std::pair{&acceptor, &dialer}, std::pair{&dialer, &acceptor}}) {
      absl::Span<const uint8_t> out = from->output();
      if (out.empty()) continue;
      moved = true;
      std::vector<uint8_t> message(out.begin(), out.end());
      from->OutputSent(message.size());
      if (tamper != nullptr) tamper(message);
      // Delivered in two pieces, as a socket may.
      size_t delivered = 0;
      while (delivered < message.size() && !to->input().empty()) {
        const size_t piece = std::min(to->input().size(), std::max<size_t>(1, message.size() / 2));
        const size_t count = std::min(piece, message.size() - delivered);
        std::memcpy(to->input().data(), message.data() + delivered, count);
        to->InputReceived(count);
        delivered += count;
      }
    }
  }
}

// Exchange, and both ends must have finished.
void Run(AuthExchange& dialer, AuthExchange& acceptor) {
  Exchange(dialer, acceptor);
  REQUIRE(dialer.finished());
  REQUIRE(acceptor.finished());
}

TEST_CASE("the same secret on both ends: both accept", "[auth]") {
  AuthExchange dialer(Role::kDialer, &kSecret, kLabel);
  AuthExchange acceptor(Role::kAcceptor, &kSecret, kLabel);
  Run(dialer, acceptor);
  CHECK(dialer.result().ok());
  CHECK(acceptor.result().ok());
}

TEST_CASE("no secret on either end: both accept", "[auth]") {
  AuthExchange dialer(Role::kDialer, nullptr, kLabel);
  AuthExchange acceptor(Role::kAcceptor, nullptr, kLabel);
  Run(dialer, acceptor);
  CHECK(dialer.result().ok());
  CHECK(acceptor.result().ok());
}

TEST_CASE("different secrets: both refuse, saying the secrets differ", "[auth]") {
  AuthExchange dialer(Role::kDialer, &kSecret, kLabel);
  AuthExchange acceptor(Role::kAcceptor, &kOtherSecret, kLabel);
  Run(dialer, acceptor);
  REQUIRE_FALSE(acceptor.result().ok());
  CHECK(absl::StrContains(acceptor.result().message(), "does not match"));
  REQUIRE_FALSE(dialer.result().ok());
  CHECK(absl::StrContains(dialer.result().message(), "the job secrets differ"));
}

TEST_CASE("a dialer without the secret is refused and told to set it", "[auth]") {
  AuthExchange dialer(Role::kDialer, nullptr, kLabel);
  AuthExchange acceptor(Role::kAcceptor, &kSecret, kLabel);
  Run(dialer, acceptor);
  REQUIRE_FALSE(acceptor.result().ok());
  CHECK(absl::StrContains(acceptor.result().message(), "sent no proof"));
  REQUIRE_FALSE(dialer.result().ok());
  CHECK(absl::StrContains(dialer.result().message(), "this process has none"));
}

TEST_CASE("an acceptor without the secret is not trusted by a dialer that has it", "[auth]") {
  AuthExchange dialer(Role::kDialer, &kSecret, kLabel);
  AuthExchange acceptor(Role::kAcceptor, nullptr, kLabel);
  Run(dialer, acceptor);
  CHECK_FALSE(acceptor.result().ok());
  REQUIRE_FALSE(dialer.result().ok());
  CHECK(absl::StrContains(dialer.result().message(), "it has no job secret"));
}

TEST_CASE("an impostor acceptor that says 'accepted' without a proof is refused", "[auth]") {
  AuthExchange dialer(Role::kDialer, &kSecret, kLabel);
  // Plays the acceptor by hand: a challenge, then an acceptance with a guessed proof.
  REQUIRE(dialer.output().size() == kOfferBytes);
  dialer.OutputSent(kOfferBytes);
  const auto challenge = EncodeChallenge({true, false, RandomNonce()});
  std::memcpy(dialer.input().data(), challenge.data(), challenge.size());
  dialer.InputReceived(challenge.size());
  REQUIRE(dialer.output().size() == kResponseBytes);
  dialer.OutputSent(kResponseBytes);
  Verdict forged;
  forged.has_proof = true;
  forged.proof = Hmac("a guess at the secret", challenge);
  const auto verdict = EncodeVerdict(forged);
  std::memcpy(dialer.input().data(), verdict.data(), verdict.size());
  dialer.InputReceived(verdict.size());
  REQUIRE(dialer.finished());
  REQUIRE_FALSE(dialer.result().ok());
  CHECK(absl::StrContains(dialer.result().message(), "does not match"));
}

TEST_CASE("a recorded response does not pass a fresh challenge", "[auth]") {
  // Moves `from`'s pending output into `to`.
  auto pass = [](AuthExchange& from, AuthExchange& to) {
    const auto out = from.output();
    REQUIRE(to.input().size() == out.size());
    std::memcpy(to.input().data(), out.data(), out.size());
    const size_t size = out.size();
    from.OutputSent(size);
    to.InputReceived(size);
  };
  std::vector<uint8_t> recorded;
  {
    AuthExchange dialer(Role::kDialer, &kSecret, kLabel);
    AuthExchange acceptor(Role::kAcceptor, &kSecret, kLabel);
    pass(dialer, acceptor);  // offer
    pass(acceptor, dialer);  // challenge
    recorded.assign(dialer.output().begin(), dialer.output().end());
  }
  AuthExchange dialer(Role::kDialer, &kSecret, kLabel);
  AuthExchange acceptor(Role::kAcceptor, &kSecret, kLabel);
  pass(dialer, acceptor);  // a fresh offer and challenge
  acceptor.OutputSent(acceptor.output().size());
  REQUIRE(acceptor.input().size() == recorded.size());
  std::memcpy(acceptor.input().data(), recorded.data(), recorded.size());
  acceptor.InputReceived(recorded.size());
  acceptor.OutputSent(acceptor.output().size());
  REQUIRE(acceptor.finished());
  REQUIRE_FALSE(acceptor.result().ok());
  CHECK(absl::StrContains(acceptor.result().message(), "does not match"));
}

TEST_CASE("a proof made for another kind of link is refused", "[auth]") {
  AuthExchange dialer(Role::kDialer, &kSecret, "chorus-tcp-store");
  AuthExchange acceptor(Role::kAcceptor, &kSecret, "chorus-tcp-transport");
  Run(dialer, acceptor);
  CHECK_FALSE(acceptor.result().ok());
  CHECK_FALSE(dialer.result().ok());
}

TEST_CASE("a flipped bit anywhere in the exchange fails it on a side that checks", "[auth]") {
  // Every seventh bit of the four messages: the exchange never passes on both ends.
  static size_t flip_at;
  for (flip_at = 0; flip_at < (kOfferBytes + kChallengeBytes + kResponseBytes + kVerdictBytes) * 8;
       flip_at += 7) {
    static size_t seen;
    seen = 0;
    AuthExchange dialer(Role::kDialer, &kSecret, kLabel);
    AuthExchange acceptor(Role::kAcceptor, &kSecret, kLabel);
    Exchange(dialer, acceptor, [](std::vector<uint8_t>& message) {
      const size_t bits = message.size() * 8;
      if (flip_at >= seen * 8 && flip_at < seen * 8 + bits) {
        const size_t bit = flip_at - seen * 8;
        message[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      }
      seen += message.size();
    });
    INFO("flipped bit " << flip_at);
    const bool dialer_passed = dialer.finished() && dialer.result().ok();
    const bool acceptor_passed = acceptor.finished() && acceptor.result().ok();
    CHECK_FALSE((dialer_passed && acceptor_passed));
  }
}

TEST_CASE("the codecs round-trip and refuse what they do not know", "[auth]") {
  Response response;
  response.has_proof = true;
  response.nonce = RandomNonce();
  response.proof = Hmac("key-of-sixteen-bytes", response.nonce);
  const auto encoded = EncodeResponse(response);
  const absl::StatusOr<Response> decoded = DecodeResponse(encoded);
  REQUIRE(decoded.ok());
  CHECK(decoded->nonce == response.nonce);
  CHECK(ProofsEqual(decoded->proof, response.proof));

  auto truncated = absl::MakeConstSpan(encoded.data(), encoded.size() - 1);
  CHECK_FALSE(DecodeResponse(truncated).ok());
  auto unannounced = EncodeResponse({false, response.nonce, {}});
  unannounced[40] = 1;
  CHECK_FALSE(DecodeResponse(unannounced).ok());
  auto verdict = EncodeVerdict({AuthVerdict::kAccepted, false, {}});
  verdict[10] = 9;  // an unknown verdict
  CHECK_FALSE(DecodeVerdict(verdict).ok());
  auto challenge = EncodeChallenge({false, false, RandomNonce()});
  challenge[0] = 'X';
  CHECK_FALSE(DecodeChallenge(challenge).ok());
  CHECK(DecodeOffer(EncodeOffer()).ok());
  CHECK(LooksLikeOffer(EncodeOffer()));
  const uint8_t client_hello[16] = {22, 3, 1, 0, 200};
  const absl::Status tls = DecodeOffer(client_hello);
  REQUIRE_FALSE(tls.ok());
  CHECK(absl::StrContains(tls.message(), "the peer speaks TLS"));
}

TEST_CASE("HMAC-SHA256 matches RFC 4231 test case 2", "[auth]") {
  const std::string data = "what do ya want for nothing?";
  const Proof proof = Hmac("Jefe", absl::MakeConstSpan(
                                       reinterpret_cast<const uint8_t*>(data.data()), data.size()));
  const uint8_t expected[] = {0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24,
                              0x26, 0x08, 0x95, 0x75, 0xc7, 0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27,
                              0x39, 0x83, 0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
  CHECK(std::memcmp(proof.data(), expected, sizeof(expected)) == 0);
}

}  // namespace
}  // namespace chorus::security
