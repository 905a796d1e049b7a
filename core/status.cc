#include "chorus/core/status.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace chorus {
namespace {

// Payload type URLs (absl::Status payloads are keyed by URL-like strings).
constexpr absl::string_view kKindPayload = "chorus.dev/error_kind";
constexpr absl::string_view kPeerPayload = "chorus.dev/peer_rank";

absl::StatusCode CodeFor(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kOk:
      return absl::StatusCode::kOk;
    case ErrorKind::kDeadlineExceeded:
      return absl::StatusCode::kDeadlineExceeded;
    case ErrorKind::kPeerUnavailable:
      return absl::StatusCode::kUnavailable;
    case ErrorKind::kInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case ErrorKind::kAborted:
      return absl::StatusCode::kAborted;
    case ErrorKind::kMismatch:
      return absl::StatusCode::kFailedPrecondition;
    case ErrorKind::kInternal:
      return absl::StatusCode::kInternal;
  }
  return absl::StatusCode::kInternal;
}

}  // namespace

absl::string_view ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kOk:
      return "ok";
    case ErrorKind::kDeadlineExceeded:
      return "deadline exceeded";
    case ErrorKind::kPeerUnavailable:
      return "peer unavailable";
    case ErrorKind::kInvalidArgument:
      return "invalid argument";
    case ErrorKind::kAborted:
      return "aborted";
    case ErrorKind::kMismatch:
      return "mismatch";
    case ErrorKind::kInternal:
      return "internal";
  }
  return "unknown";
}

absl::Status MakeError(ErrorKind kind, absl::string_view message, int peer_rank) {
  if (kind == ErrorKind::kOk) return absl::OkStatus();
  absl::Status status(CodeFor(kind), message);
  status.SetPayload(kKindPayload, absl::Cord(absl::StrCat(static_cast<int>(kind))));
  if (peer_rank >= 0) status.SetPayload(kPeerPayload, absl::Cord(absl::StrCat(peer_rank)));
  return status;
}

ErrorKind GetErrorKind(const absl::Status& status) {
  if (status.ok()) return ErrorKind::kOk;
  if (auto payload = status.GetPayload(kKindPayload)) {
    int value = 0;
    if (absl::SimpleAtoi(std::string(*payload), &value)) return static_cast<ErrorKind>(value);
  }
  switch (status.code()) {
    case absl::StatusCode::kDeadlineExceeded:
      return ErrorKind::kDeadlineExceeded;
    case absl::StatusCode::kUnavailable:
      return ErrorKind::kPeerUnavailable;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return ErrorKind::kInvalidArgument;
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      return ErrorKind::kAborted;
    case absl::StatusCode::kFailedPrecondition:
      return ErrorKind::kMismatch;
    default:
      return ErrorKind::kInternal;
  }
}

std::optional<int> ErrorPeerRank(const absl::Status& status) {
  auto payload = status.GetPayload(kPeerPayload);
  if (!payload) return std::nullopt;
  int value = 0;
  if (!absl::SimpleAtoi(std::string(*payload), &value)) return std::nullopt;
  return value;
}

std::string ErrorText(const absl::Status& status) {
  if (status.ok()) return "ok";
  return absl::StrCat(ErrorKindName(GetErrorKind(status)), ": ", status.message());
}

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  absl::Status out(status.code(), absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload([&out](absl::string_view url, const absl::Cord& payload) {
    out.SetPayload(url, payload);
  });
  return out;
}

}  // namespace chorus
