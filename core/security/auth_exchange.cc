#include "chorus/core/security/auth_exchange.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chorus/core/byte_order.h"
#include "chorus/core/status.h"

namespace chorus::security {
namespace {

constexpr char kOfferMagic[8] = {'C', 'H', 'O', 'R', 'U', 'S', 'O', 'F'};
constexpr char kChallengeMagic[8] = {'C', 'H', 'O', 'R', 'U', 'S', 'C', 'H'};
constexpr char kResponseMagic[8] = {'C', 'H', 'O', 'R', 'U', 'S', 'A', 'R'};
constexpr char kVerdictMagic[8] = {'C', 'H', 'O', 'R', 'U', 'S', 'A', 'V'};
constexpr uint16_t kHasSecretOrProof = 1;
constexpr uint16_t kRequiresTls = 2;
// Bytes of a response and of a verdict before their proof: what the proof covers of them.
constexpr size_t kResponseHead = 32;
constexpr size_t kVerdictHead = 16;

// Writes the common head of every message: magic, version, a u16 and a u32.
void EncodeHead(uint8_t* out, const char (&magic)[8], uint16_t word, uint32_t flags) {
  std::memcpy(out, magic, sizeof(magic));
  StoreLittleEndian<uint16_t>(&out[8], kAuthVersion);
  StoreLittleEndian<uint16_t>(&out[10], word);
  StoreLittleEndian<uint32_t>(&out[12], flags);
}

// Checks size, magic and version; `what` names the message in errors.
absl::Status CheckHead(absl::Span<const uint8_t> bytes, size_t size, const char (&magic)[8],
                       absl::string_view what) {
  if (bytes.size() < size) {
    return InvalidArgumentError(absl::StrCat("authentication ", what, " truncated: ", bytes.size(),
                                             " of ", size, " bytes"));
  }
  if (std::memcmp(bytes.data(), magic, sizeof(magic)) != 0) {
    // A TLS record starts with its content type (22: handshake, 21: alert) and version 3.x.
    if ((bytes[0] == 22 || bytes[0] == 21) && bytes[1] == 3) {
      return InvalidArgumentError(
          "the peer speaks TLS and this process does not use it; set CHORUS_TLS_CERT, "
          "CHORUS_TLS_KEY and CHORUS_TLS_CA here as on the peer");
    }
    return InvalidArgumentError(absl::StrCat("authentication ", what,
                                             " has a bad magic (not a Chorus peer, or a Chorus "
                                             "build without link authentication)"));
  }
  const uint16_t version = LoadLittleEndian<uint16_t>(&bytes[8]);
  if (version != kAuthVersion) {
    return InvalidArgumentError(absl::StrCat("authentication ", what, " has version ", version,
                                             "; this build speaks ", kAuthVersion));
  }
  return absl::OkStatus();
}

bool AllZero(absl::Span<const uint8_t> bytes) {
  for (uint8_t byte : bytes) {
    if (byte != 0) return false;
  }
  return true;
}

}  // namespace

std::array<uint8_t, kOfferBytes> EncodeOffer() {
  std::array<uint8_t, kOfferBytes> out{};
  EncodeHead(out.data(), kOfferMagic, 0, 0);
  return out;
}

absl::Status DecodeOffer(absl::Span<const uint8_t> bytes) {
  CHORUS_RETURN_IF_ERROR(CheckHead(bytes, kOfferBytes, kOfferMagic, "offer"));
  if (!AllZero(bytes.subspan(10, 6))) {
    return InvalidArgumentError("authentication offer has non-zero reserved bytes");
  }
  return absl::OkStatus();
}

bool LooksLikeOffer(absl::Span<const uint8_t> bytes) {
  return bytes.size() >= sizeof(kOfferMagic) &&
         std::memcmp(bytes.data(), kOfferMagic, sizeof(kOfferMagic)) == 0;
}

std::array<uint8_t, kChallengeBytes> EncodeChallenge(const Challenge& challenge) {
  std::array<uint8_t, kChallengeBytes> out{};
  EncodeHead(out.data(), kChallengeMagic,
             static_cast<uint16_t>((challenge.has_secret ? kHasSecretOrProof : 0) |
                                   (challenge.requires_tls ? kRequiresTls : 0)),
             0);
  std::memcpy(&out[16], challenge.nonce.data(), kNonceBytes);
  return out;
}

absl::StatusOr<Challenge> DecodeChallenge(absl::Span<const uint8_t> bytes) {
  CHORUS_RETURN_IF_ERROR(CheckHead(bytes, kChallengeBytes, kChallengeMagic, "challenge"));
  const uint16_t flags = LoadLittleEndian<uint16_t>(&bytes[10]);
  if ((flags & ~(kHasSecretOrProof | kRequiresTls)) != 0 ||
      LoadLittleEndian<uint32_t>(&bytes[12]) != 0) {
    return InvalidArgumentError("authentication challenge has unknown flags");
  }
  Challenge challenge;
  challenge.has_secret = (flags & kHasSecretOrProof) != 0;
  challenge.requires_tls = (flags & kRequiresTls) != 0;
  std::memcpy(challenge.nonce.data(), &bytes[16], kNonceBytes);
  return challenge;
}

std::array<uint8_t, kResponseBytes> EncodeResponse(const Response& response) {
  std::array<uint8_t, kResponseBytes> out{};
  EncodeHead(out.data(), kResponseMagic, response.has_proof ? kHasSecretOrProof : 0, 0);
  std::memcpy(&out[16], response.nonce.data(), kNonceBytes);
  if (response.has_proof) std::memcpy(&out[kResponseHead], response.proof.data(), kProofBytes);
  return out;
}

absl::StatusOr<Response> DecodeResponse(absl::Span<const uint8_t> bytes) {
  CHORUS_RETURN_IF_ERROR(CheckHead(bytes, kResponseBytes, kResponseMagic, "response"));
  const uint16_t flags = LoadLittleEndian<uint16_t>(&bytes[10]);
  if ((flags & ~kHasSecretOrProof) != 0 || LoadLittleEndian<uint32_t>(&bytes[12]) != 0) {
    return InvalidArgumentError("authentication response has unknown flags");
  }
  Response response;
  response.has_proof = (flags & kHasSecretOrProof) != 0;
  std::memcpy(response.nonce.data(), &bytes[16], kNonceBytes);
  if (response.has_proof) {
    std::memcpy(response.proof.data(), &bytes[kResponseHead], kProofBytes);
  } else if (!AllZero(bytes.subspan(kResponseHead, kProofBytes))) {
    return InvalidArgumentError("authentication response carries a proof it does not announce");
  }
  return response;
}

std::array<uint8_t, kVerdictBytes> EncodeVerdict(const Verdict& verdict) {
  std::array<uint8_t, kVerdictBytes> out{};
  EncodeHead(out.data(), kVerdictMagic, static_cast<uint16_t>(verdict.verdict),
             verdict.has_proof ? kHasSecretOrProof : 0);
  if (verdict.has_proof) std::memcpy(&out[kVerdictHead], verdict.proof.data(), kProofBytes);
  return out;
}

absl::StatusOr<Verdict> DecodeVerdict(absl::Span<const uint8_t> bytes) {
  CHORUS_RETURN_IF_ERROR(CheckHead(bytes, kVerdictBytes, kVerdictMagic, "verdict"));
  const uint16_t code = LoadLittleEndian<uint16_t>(&bytes[10]);
  const uint32_t flags = LoadLittleEndian<uint32_t>(&bytes[12]);
  if (code > kMaxAuthVerdict || (flags & ~uint32_t{kHasSecretOrProof}) != 0) {
    return InvalidArgumentError(
        absl::StrCat("authentication verdict ", code, " with flags ", flags, " is unknown"));
  }
  Verdict verdict;
  verdict.verdict = static_cast<AuthVerdict>(code);
  verdict.has_proof = (flags & kHasSecretOrProof) != 0;
  if (verdict.has_proof) {
    std::memcpy(verdict.proof.data(), &bytes[kVerdictHead], kProofBytes);
  } else if (!AllZero(bytes.subspan(kVerdictHead, kProofBytes))) {
    return InvalidArgumentError("authentication verdict carries a proof it does not announce");
  }
  return verdict;
}

absl::string_view AuthVerdictName(AuthVerdict verdict) {
  switch (verdict) {
    case AuthVerdict::kAccepted:
      return "accepted";
    case AuthVerdict::kMissingProof:
      return "it requires the job secret and this process has none";
    case AuthVerdict::kWrongProof:
      return "the job secrets differ";
    case AuthVerdict::kUnexpectedProof:
      return "it has no job secret and this process has one";
  }
  return "unknown verdict";
}

Proof Hmac(absl::string_view secret, absl::Span<const uint8_t> data) {
  Proof proof{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), data.data(), data.size(),
       proof.data(), &length);
  return proof;
}

bool ProofsEqual(const Proof& a, const Proof& b) {
  return CRYPTO_memcmp(a.data(), b.data(), kProofBytes) == 0;
}

Nonce RandomNonce() {
  Nonce nonce{};
  // RAND_bytes fails only when the generator cannot be seeded, which OpenSSL reports loudly
  // on its own; a zero nonce then still yields a (replayable) proof, never a crash.
  (void)RAND_bytes(nonce.data(), static_cast<int>(nonce.size()));
  return nonce;
}

AuthExchange::AuthExchange(Role role, const AuthKey* key, absl::string_view label)
    : role_(role), key_(key), label_(label), own_nonce_(RandomNonce()) {
  if (role_ == Role::kAcceptor) {
    Expect(kOfferBytes);
  } else {
    const auto offer = EncodeOffer();
    transcript_.assign(offer.begin(), offer.end());
    Send(offer);
  }
}

absl::Span<const uint8_t> AuthExchange::output() const {
  if (stage_ != Stage::kSending) return {};
  return absl::MakeConstSpan(out_.data() + out_sent_, out_size_ - out_sent_);
}

void AuthExchange::OutputSent(size_t count) {
  out_sent_ += count;
  if (out_sent_ < out_size_) return;
  if (after_output_) {
    Finish(*std::move(after_output_));
  } else if (role_ == Role::kAcceptor) {
    Expect(kResponseBytes);
  } else {
    Expect(transcript_.size() == kOfferBytes ? kChallengeBytes : kVerdictBytes);
  }
}

absl::Span<uint8_t> AuthExchange::input() {
  if (stage_ != Stage::kReceiving) return {};
  return absl::MakeSpan(in_.data() + in_received_, in_size_ - in_received_);
}

void AuthExchange::InputReceived(size_t count) {
  in_received_ += count;
  if (in_received_ == in_size_) OnMessage();
}

void AuthExchange::Send(absl::Span<const uint8_t> bytes) {
  std::memcpy(out_.data(), bytes.data(), bytes.size());
  out_size_ = bytes.size();
  out_sent_ = 0;
  stage_ = Stage::kSending;
}

void AuthExchange::Expect(size_t bytes) {
  in_size_ = bytes;
  in_received_ = 0;
  stage_ = Stage::kReceiving;
}

void AuthExchange::Finish(absl::Status result) {
  result_ = std::move(result);
  stage_ = Stage::kFinished;
}

void AuthExchange::OnMessage() {
  if (role_ == Role::kAcceptor) {
    if (in_size_ == kOfferBytes) {
      OnOffer();
    } else {
      OnResponse();
    }
  } else if (in_size_ == kChallengeBytes) {
    OnChallenge();
  } else {
    OnVerdict();
  }
}

Proof AuthExchange::MakeProof(absl::string_view role, absl::Span<const uint8_t> head) const {
  std::vector<uint8_t> data(label_.begin(), label_.end());
  data.insert(data.end(), role.begin(), role.end());
  data.insert(data.end(), transcript_.begin(), transcript_.end());
  data.insert(data.end(), head.begin(), head.end());
  return Hmac(key_->secret, data);
}

template <typename Message, size_t kBytes>
void AuthExchange::SendProven(Message message,
                              std::array<uint8_t, kBytes> (*encode)(const Message&), size_t head,
                              absl::string_view role) {
  message.has_proof = key_ != nullptr;
  std::array<uint8_t, kBytes> encoded = encode(message);
  if (key_ != nullptr) {
    message.proof = MakeProof(role, absl::MakeConstSpan(encoded.data(), head));
    encoded = encode(message);
  }
  transcript_.insert(transcript_.end(), encoded.begin(), encoded.end());
  Send(encoded);
}

void AuthExchange::OnOffer() {
  const absl::Span<const uint8_t> received = absl::MakeConstSpan(in_.data(), in_size_);
  if (absl::Status offer = DecodeOffer(received); !offer.ok()) {
    Finish(std::move(offer));
    return;
  }
  transcript_.assign(received.begin(), received.end());
  const auto challenge = EncodeChallenge({key_ != nullptr, false, own_nonce_});
  transcript_.insert(transcript_.end(), challenge.begin(), challenge.end());
  Send(challenge);
}

void AuthExchange::OnChallenge() {
  const absl::Span<const uint8_t> received = absl::MakeConstSpan(in_.data(), in_size_);
  absl::StatusOr<Challenge> challenge = DecodeChallenge(received);
  if (!challenge.ok()) {
    Finish(challenge.status());
    return;
  }
  if (challenge->requires_tls) {
    Finish(PeerUnavailableError(
        "the peer requires TLS and this process does not use it; set CHORUS_TLS_CERT, "
        "CHORUS_TLS_KEY and CHORUS_TLS_CA here as on the peer"));
    return;
  }
  transcript_.insert(transcript_.end(), received.begin(), received.end());
  Response response;
  response.nonce = own_nonce_;
  // Sent even when the secrets cannot match, so the acceptor logs the refusal too.
  SendProven(response, EncodeResponse, kResponseHead, "dialer");
}

void AuthExchange::OnResponse() {
  const absl::Span<const uint8_t> received = absl::MakeConstSpan(in_.data(), in_size_);
  absl::StatusOr<Response> response = DecodeResponse(received);
  if (!response.ok()) {
    Finish(response.status());
    return;
  }
  AuthVerdict verdict = AuthVerdict::kAccepted;
  if (key_ == nullptr) {
    if (response->has_proof) verdict = AuthVerdict::kUnexpectedProof;
  } else if (!response->has_proof) {
    verdict = AuthVerdict::kMissingProof;
  } else if (!ProofsEqual(response->proof, MakeProof("dialer", received.first(kResponseHead)))) {
    verdict = AuthVerdict::kWrongProof;
  }
  transcript_.insert(transcript_.end(), received.begin(), received.end());
  Verdict reply;
  reply.verdict = verdict;
  SendProven(reply, EncodeVerdict, kVerdictHead, "acceptor");
  switch (verdict) {
    case AuthVerdict::kAccepted:
      after_output_ = absl::OkStatus();
      break;
    case AuthVerdict::kMissingProof:
      after_output_ = PeerUnavailableError(
          absl::StrCat("the peer sent no proof of the job secret, which this process holds (",
                       key_->source, "); give every rank and the store the same secret"));
      break;
    case AuthVerdict::kWrongProof:
      after_output_ = PeerUnavailableError(
          absl::StrCat("the peer's proof does not match this process's job secret (",
                       key_->source, "): a process of another job, or a different secret"));
      break;
    case AuthVerdict::kUnexpectedProof:
      after_output_ = PeerUnavailableError(
          "the peer proved a job secret and this process holds none; set CHORUS_AUTH_KEY or "
          "CHORUS_AUTH_KEY_FILE here as on the peer");
      break;
  }
}

void AuthExchange::OnVerdict() {
  const absl::Span<const uint8_t> received = absl::MakeConstSpan(in_.data(), in_size_);
  absl::StatusOr<Verdict> verdict = DecodeVerdict(received);
  if (!verdict.ok()) {
    Finish(verdict.status());
    return;
  }
  if (verdict->verdict != AuthVerdict::kAccepted) {
    Finish(PeerUnavailableError(absl::StrCat("the peer refused this process's authentication: ",
                                             AuthVerdictName(verdict->verdict),
                                             "; give every rank and the store the same "
                                             "CHORUS_AUTH_KEY or CHORUS_AUTH_KEY_FILE")));
    return;
  }
  if (key_ == nullptr) {
    Finish(verdict->has_proof
               ? PeerUnavailableError("the peer proved a job secret and this process holds "
                                      "none; set CHORUS_AUTH_KEY or CHORUS_AUTH_KEY_FILE here")
               : absl::OkStatus());
    return;
  }
  // Holding a secret, this side accepts only a peer that proves it: a peer claiming to have
  // none could be anyone.
  if (!verdict->has_proof) {
    Finish(PeerUnavailableError(absl::StrCat(
        "the peer accepted this process without proving the job secret (", key_->source,
        "); it has none, or is not a member of the job")));
    return;
  }
  if (!ProofsEqual(verdict->proof, MakeProof("acceptor", received.first(kVerdictHead)))) {
    Finish(PeerUnavailableError(absl::StrCat(
        "the peer's proof does not match this process's job secret (", key_->source,
        "): a process of another job, or a different secret")));
    return;
  }
  Finish(absl::OkStatus());
}

}  // namespace chorus::security
