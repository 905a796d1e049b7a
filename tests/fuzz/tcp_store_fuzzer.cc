// Fuzz target for the TCP store's message decoders (rendezvous/tcp_store_protocol.h): the server
// decodes whatever any process that can reach its port sends, and the client decodes the
// server's replies.
//
// Input: a payload, decoded both as a request and as a reply (the frame header is checked too,
// on the first four bytes).
//
// Properties checked, beyond "no crash and no sanitizer report":
// - an accepted request or reply re-encodes to exactly the input (no field, string or byte
//   silently dropped or invented);
// - a frame length is accepted iff it is within kMaxPayloadBytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "chorus/rendezvous/tcp_store_protocol.h"
#include "tests/fuzz/fuzz_check.h"

namespace chorus::tcp_store {
namespace {

void CheckMessages(absl::string_view input) {
  if (input.size() >= kFrameHeaderBytes) {
    uint32_t announced = 0;
    std::memcpy(&announced, input.data(), sizeof(announced));
    FUZZ_CHECK(DecodeFrameLength(input).ok() == (announced <= kMaxPayloadBytes));
  }
  if (const auto request = DecodeRequest(input); request.ok()) {
    const std::string frame = EncodeRequest(*request);
    FUZZ_CHECK(absl::string_view(frame).substr(kFrameHeaderBytes) == input);
  }
  if (const auto reply = DecodeReply(input); reply.ok()) {
    const std::string frame = EncodeReply(*reply);
    FUZZ_CHECK(absl::string_view(frame).substr(kFrameHeaderBytes) == input);
  }
}

}  // namespace
}  // namespace chorus::tcp_store

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  chorus::tcp_store::CheckMessages(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
