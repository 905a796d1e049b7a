// The TCP store's messages (pure: no sockets, fuzzed). Every message is a frame:
//
//   u32 payload length (little-endian) | payload
//
// A request payload is  u8 op | u32 timeout_ms | i64 delta | u32 n | n x (u32 len | bytes)
// (the strings are keys, or key and value alternating for kSet/kMultiSet). A reply payload is
// u8 outcome | i64 number | u32 n | n x (u32 len | bytes): the values for kGet/kMultiGet, the
// missing keys for kTimedOut, the message for kError. One request is answered by one reply, in
// order, on each connection.
#ifndef CHORUS_RENDEZVOUS_TCP_STORE_PROTOCOL_H_
#define CHORUS_RENDEZVOUS_TCP_STORE_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace chorus::tcp_store {

// A frame's payload is at most this long: a store holds addresses and small records, and a
// bound keeps a corrupt length from making either side allocate gigabytes.
inline constexpr uint32_t kMaxPayloadBytes = 64u << 20;
inline constexpr size_t kFrameHeaderBytes = 4;
// A request's timeout_ms that means "wait as long as it takes".
inline constexpr uint32_t kNoTimeoutMs = UINT32_MAX;

enum class Op : uint8_t {
  kPing = 1,      // answered kOk: the connection works
  kSet = 2,       // strings: key, value
  kGet = 3,       // strings: key; waits up to timeout_ms
  kTryGet = 4,    // strings: key; kOk with one value, or kAbsent
  kAdd = 5,       // strings: key; adds delta, replies the new value in `number`
  kDelete = 6,    // strings: key
  kMultiSet = 7,  // strings: key, value, key, value, ...
  kMultiGet = 8,  // strings: keys; waits up to timeout_ms for all of them
};

enum class Outcome : uint8_t {
  kOk = 1,
  kAbsent = 2,    // kTryGet: no such key
  kTimedOut = 3,  // strings: the keys still missing when timeout_ms ran out
  kError = 4,     // strings: one message (a bad request, a value that is not an integer)
};

struct Request {
  Op op = Op::kPing;
  uint32_t timeout_ms = 0;  // how long a get may wait; kNoTimeoutMs: no limit
  int64_t delta = 0;
  std::vector<std::string> strings;
};

struct Reply {
  Outcome outcome = Outcome::kOk;
  int64_t number = 0;
  std::vector<std::string> strings;
};

// Frames (header and payload) ready to send.
std::string EncodeRequest(const Request& request);
std::string EncodeReply(const Reply& reply);

// The payload length a frame header announces; kInvalidArgument above kMaxPayloadBytes.
// `header` holds kFrameHeaderBytes bytes.
absl::StatusOr<uint32_t> DecodeFrameLength(absl::string_view header);

// Payloads (without the frame header). kInvalidArgument for anything malformed: unknown op or
// outcome, a string running past the end, bytes left over.
absl::StatusOr<Request> DecodeRequest(absl::string_view payload);
absl::StatusOr<Reply> DecodeReply(absl::string_view payload);

}  // namespace chorus::tcp_store

#endif  // CHORUS_RENDEZVOUS_TCP_STORE_PROTOCOL_H_
