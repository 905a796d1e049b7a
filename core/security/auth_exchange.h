// The challenge-response that proves, at the start of every TCP link (transport streams and TCP
// store connections), that both ends hold the job secret (auth_key.h), without sending it.
// Pure: no sockets; the caller moves the bytes (channel.h drives it over a socket), so a fuzzer
// can target it.
//
// Four fixed-size messages, all integers little-endian:
//   Offer      dialer -> acceptor, 16 bytes: the dialer speaks first, so that an acceptor
//     expecting TLS recognises a plain dialer (tls.h) and one not expecting it a TLS dialer.
//     0 u8[8] "CHORUSOF" | 8 u16 version | 10 u8[6] 0
//   Challenge  acceptor -> dialer, 32 bytes
//     0 u8[8] "CHORUSCH" | 8 u16 version | 10 u16 flags (1: the acceptor holds a secret;
//     2: refused, the acceptor requires TLS, sent in the clear) | 12 u32 0
//     16 u8[16] acceptor nonce
//   Response   dialer -> acceptor, 64 bytes
//     0 u8[8] "CHORUSAR" | 8 u16 version | 10 u16 flags (1: a proof follows) | 12 u32 0
//     16 u8[16] dialer nonce | 32 u8[32] proof (zero without a secret)
//   Verdict    acceptor -> dialer, 48 bytes
//     0 u8[8] "CHORUSAV" | 8 u16 version | 10 u16 verdict (AuthVerdict) | 12 u32 flags
//     (1: a proof follows) | 16 u8[32] proof (zero without a secret)
// The dialer's proof is HMAC-SHA256(secret, label | "dialer" | offer | challenge | response
// bytes 0-31); the acceptor's is HMAC-SHA256(secret, label | "acceptor" | offer | challenge |
// response | verdict bytes 0-15): each covers every byte exchanged before it, so a changed
// byte fails the exchange.
// Fresh nonces on both sides make a recorded exchange useless to replay, and the label keeps a
// proof made for one kind of link from being accepted on another.
//
// Both ends must agree: a secret on one side only is refused on both, so a process cannot be
// talked out of authentication by a peer that claims to have no secret.
#ifndef CHORUS_CORE_SECURITY_AUTH_EXCHANGE_H_
#define CHORUS_CORE_SECURITY_AUTH_EXCHANGE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "chorus/core/security/auth_key.h"

namespace chorus::security {

inline constexpr uint16_t kAuthVersion = 1;
// The labels of the two kinds of link, so a proof made for one is refused on the other.
inline constexpr absl::string_view kTransportLinkLabel = "chorus-tcp-transport";
inline constexpr absl::string_view kStoreLinkLabel = "chorus-tcp-store";
inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kProofBytes = 32;
inline constexpr size_t kOfferBytes = 16;
inline constexpr size_t kChallengeBytes = 32;
inline constexpr size_t kResponseBytes = 64;
inline constexpr size_t kVerdictBytes = 48;

using Nonce = std::array<uint8_t, kNonceBytes>;
using Proof = std::array<uint8_t, kProofBytes>;

enum class AuthVerdict : uint16_t {
  kAccepted = 0,
  kMissingProof = 1,     // the acceptor holds a secret; the dialer sent no proof
  kWrongProof = 2,       // the proof does not match the acceptor's secret
  kUnexpectedProof = 3,  // the dialer sent a proof; the acceptor holds no secret
};
inline constexpr uint16_t kMaxAuthVerdict = 3;

struct Challenge {
  bool has_secret = false;
  bool requires_tls = false;  // a refusal: the dialer does not use TLS and the acceptor does
  Nonce nonce{};
};
struct Response {
  bool has_proof = false;
  Nonce nonce{};
  Proof proof{};
};
struct Verdict {
  AuthVerdict verdict = AuthVerdict::kAccepted;
  bool has_proof = false;
  Proof proof{};
};

// The codecs. Decoders check magic, version, reserved bits, and that a message without a proof
// carries zeros in its place; `bytes` must hold at least the message's size.
std::array<uint8_t, kOfferBytes> EncodeOffer();
absl::Status DecodeOffer(absl::Span<const uint8_t> bytes);
// Whether `bytes` (at least 8) begin an Offer: how a TLS acceptor recognises a plain dialer.
bool LooksLikeOffer(absl::Span<const uint8_t> bytes);
std::array<uint8_t, kChallengeBytes> EncodeChallenge(const Challenge& challenge);
absl::StatusOr<Challenge> DecodeChallenge(absl::Span<const uint8_t> bytes);
std::array<uint8_t, kResponseBytes> EncodeResponse(const Response& response);
absl::StatusOr<Response> DecodeResponse(absl::Span<const uint8_t> bytes);
std::array<uint8_t, kVerdictBytes> EncodeVerdict(const Verdict& verdict);
absl::StatusOr<Verdict> DecodeVerdict(absl::Span<const uint8_t> bytes);

absl::string_view AuthVerdictName(AuthVerdict verdict);

// One end of one exchange. Thread-compatible.
class AuthExchange {
 public:
  enum class Role { kDialer, kAcceptor };

  // `key` may be null (this process holds no secret); it must outlive the exchange. `label`
  // names the kind of link (kTransportLinkLabel, kStoreLinkLabel).
  AuthExchange(Role role, const AuthKey* key, absl::string_view label);

  // Bytes to send now; empty while the exchange waits to read, or is over.
  absl::Span<const uint8_t> output() const;
  void OutputSent(size_t count);
  // Room for the bytes the exchange waits for now; empty while it has output, or is over.
  absl::Span<uint8_t> input();
  // `count` bytes were written into input().
  void InputReceived(size_t count);

  // Nothing left to send or read: result() says how it went.
  bool finished() const { return stage_ == Stage::kFinished; }
  // OK once both ends have proven what they must; else why not, written for this side's log
  // and error ("the peer ..."). Meaningful once finished().
  const absl::Status& result() const { return result_; }

 private:
  enum class Stage { kSending, kReceiving, kFinished };

  void OnMessage();
  void OnOffer();
  void OnChallenge();
  void OnResponse();
  void OnVerdict();
  void Send(absl::Span<const uint8_t> bytes);
  void Expect(size_t bytes);
  void Finish(absl::Status result);
  // The proof of `role` over the transcript so far and `head`, the new message's bytes before
  // its proof.
  Proof MakeProof(absl::string_view role, absl::Span<const uint8_t> head) const;
  // Sends `message` (a Response or a Verdict) with `role`'s proof over the transcript and the
  // message's first `head` bytes when this side holds a secret, and records it.
  template <typename Message, size_t kBytes>
  void SendProven(Message message, std::array<uint8_t, kBytes> (*encode)(const Message&),
                  size_t head, absl::string_view role);

  const Role role_;
  const AuthKey* const key_;
  const std::string label_;
  Stage stage_ = Stage::kSending;
  absl::Status result_;
  // The status the exchange ends with once the pending output is sent.
  std::optional<absl::Status> after_output_;
  Nonce own_nonce_{};
  // Every message exchanged so far, in order.
  std::vector<uint8_t> transcript_;
  std::array<uint8_t, kResponseBytes> out_{};  // the largest message
  size_t out_size_ = 0;
  size_t out_sent_ = 0;
  std::array<uint8_t, kResponseBytes> in_{};
  size_t in_size_ = 0;
  size_t in_received_ = 0;
};

// HMAC-SHA256 of `data` under `secret` (OpenSSL's), and a comparison that takes the same time
// wherever the proofs differ.
Proof Hmac(absl::string_view secret, absl::Span<const uint8_t> data);
bool ProofsEqual(const Proof& a, const Proof& b);
// Random bytes from OpenSSL's generator.
Nonce RandomNonce();

}  // namespace chorus::security

#endif  // CHORUS_CORE_SECURITY_AUTH_EXCHANGE_H_
