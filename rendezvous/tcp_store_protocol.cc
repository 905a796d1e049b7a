#include "chorus/rendezvous/tcp_store_protocol.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"

namespace chorus::tcp_store {
namespace {

template <typename T>
void Put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // the protocol is little-endian, as x86 and arm64
  out.append(bytes, sizeof(T));
}

void PutStrings(std::string& out, const std::vector<std::string>& strings) {
  Put<uint32_t>(out, static_cast<uint32_t>(strings.size()));
  for (const std::string& s : strings) {
    Put<uint32_t>(out, static_cast<uint32_t>(s.size()));
    out.append(s);
  }
}

std::string Frame(std::string payload) {
  std::string frame;
  frame.reserve(kFrameHeaderBytes + payload.size());
  Put<uint32_t>(frame, static_cast<uint32_t>(payload.size()));
  frame.append(payload);
  return frame;
}

// Reads fields front to back; any read past the end marks the reader failed.
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : rest_(bytes) {}

  template <typename T>
  T Get() {
    T value{};
    if (rest_.size() < sizeof(T)) {
      failed_ = true;
      return value;
    }
    std::memcpy(&value, rest_.data(), sizeof(T));
    rest_.remove_prefix(sizeof(T));
    return value;
  }

  std::vector<std::string> Strings() {
    std::vector<std::string> strings;
    const uint32_t count = Get<uint32_t>();
    // Each string needs at least its 4-byte length: a count beyond that is a lie, refused
    // before it sizes anything.
    if (failed_ || count > rest_.size() / sizeof(uint32_t)) {
      failed_ = true;
      return strings;
    }
    strings.reserve(count);
    for (uint32_t i = 0; i < count; ++i) {
      const uint32_t length = Get<uint32_t>();
      if (failed_ || length > rest_.size()) {
        failed_ = true;
        return strings;
      }
      strings.emplace_back(rest_.substr(0, length));
      rest_.remove_prefix(length);
    }
    return strings;
  }

  // OK if every read succeeded and nothing is left.
  absl::Status Finish(absl::string_view what) const {
    if (failed_) return InvalidArgumentError(absl::StrCat("tcp store: truncated ", what));
    if (!rest_.empty()) {
      return InvalidArgumentError(
          absl::StrCat("tcp store: ", rest_.size(), " stray bytes after a ", what));
    }
    return absl::OkStatus();
  }

 private:
  absl::string_view rest_;
  bool failed_ = false;
};

}  // namespace

std::string EncodeRequest(const Request& request) {
  std::string payload;
  Put<uint8_t>(payload, static_cast<uint8_t>(request.op));
  Put<uint32_t>(payload, request.timeout_ms);
  Put<int64_t>(payload, request.delta);
  PutStrings(payload, request.strings);
  return Frame(std::move(payload));
}

std::string EncodeReply(const Reply& reply) {
  std::string payload;
  Put<uint8_t>(payload, static_cast<uint8_t>(reply.outcome));
  Put<int64_t>(payload, reply.number);
  PutStrings(payload, reply.strings);
  return Frame(std::move(payload));
}

absl::StatusOr<uint32_t> DecodeFrameLength(absl::string_view header) {
  uint32_t length = 0;
  std::memcpy(&length, header.data(), sizeof(length));
  if (length > kMaxPayloadBytes) {
    return InvalidArgumentError(absl::StrCat("tcp store: a frame of ", length,
                                             " bytes is over the limit of ", kMaxPayloadBytes));
  }
  return length;
}

absl::StatusOr<Request> DecodeRequest(absl::string_view payload) {
  Reader reader(payload);
  Request request;
  const uint8_t op = reader.Get<uint8_t>();
  request.timeout_ms = reader.Get<uint32_t>();
  request.delta = reader.Get<int64_t>();
  request.strings = reader.Strings();
  CHORUS_RETURN_IF_ERROR(reader.Finish("request"));
  if (op < static_cast<uint8_t>(Op::kPing) || op > static_cast<uint8_t>(Op::kMultiGet)) {
    return InvalidArgumentError(absl::StrCat("tcp store: unknown request op ", op));
  }
  request.op = static_cast<Op>(op);
  return request;
}

absl::StatusOr<Reply> DecodeReply(absl::string_view payload) {
  Reader reader(payload);
  Reply reply;
  const uint8_t outcome = reader.Get<uint8_t>();
  reply.number = reader.Get<int64_t>();
  reply.strings = reader.Strings();
  CHORUS_RETURN_IF_ERROR(reader.Finish("reply"));
  if (outcome < static_cast<uint8_t>(Outcome::kOk) ||
      outcome > static_cast<uint8_t>(Outcome::kError)) {
    return InvalidArgumentError(absl::StrCat("tcp store: unknown reply outcome ", outcome));
  }
  reply.outcome = static_cast<Outcome>(outcome);
  return reply;
}

}  // namespace chorus::tcp_store
