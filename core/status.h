// Errors at the API boundary are absl::Status values. Each carries an ErrorKind a caller can
// branch on and, where one is involved, the rank of the peer; the message says what happened
// and what to do about it.
//
//   ErrorKind          absl::StatusCode     meaning
//   kDeadlineExceeded  kDeadlineExceeded    a blocking call ran past its deadline
//   kPeerUnavailable   kUnavailable         a peer (or the store) died, closed or is unreachable
//   kInvalidArgument   kInvalidArgument     the caller passed something unusable
//   kAborted           kAborted             the operation was cancelled or its communicator aborted
//   kMismatch          kFailedPrecondition  ranks disagree on a collective's shape
//   kInternal          kInternal            a bug or an unexpected system error
#ifndef CHORUS_CORE_STATUS_H_
#define CHORUS_CORE_STATUS_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace chorus {

enum class ErrorKind {
  kOk,
  kDeadlineExceeded,
  kPeerUnavailable,
  kInvalidArgument,
  kAborted,
  kMismatch,
  kInternal,
};

absl::string_view ErrorKindName(ErrorKind kind);

// Builds a status of `kind`. `peer_rank` (if >= 0) is attached so callers can read it back
// with ErrorPeerRank() without parsing the message.
absl::Status MakeError(ErrorKind kind, absl::string_view message, int peer_rank = -1);

inline absl::Status DeadlineExceededError(absl::string_view message, int peer_rank = -1) {
  return MakeError(ErrorKind::kDeadlineExceeded, message, peer_rank);
}
inline absl::Status PeerUnavailableError(absl::string_view message, int peer_rank = -1) {
  return MakeError(ErrorKind::kPeerUnavailable, message, peer_rank);
}
inline absl::Status InvalidArgumentError(absl::string_view message) {
  return MakeError(ErrorKind::kInvalidArgument, message);
}
inline absl::Status AbortedError(absl::string_view message, int peer_rank = -1) {
  return MakeError(ErrorKind::kAborted, message, peer_rank);
}
inline absl::Status MismatchError(absl::string_view message, int peer_rank = -1) {
  return MakeError(ErrorKind::kMismatch, message, peer_rank);
}
inline absl::Status InternalError(absl::string_view message) {
  return MakeError(ErrorKind::kInternal, message);
}

// The kind of any status, also one not made by MakeError (mapped from its code).
ErrorKind GetErrorKind(const absl::Status& status);

// The peer rank attached by MakeError, if any.
std::optional<int> ErrorPeerRank(const absl::Status& status);

// What to print for a person: "<kind name>: <message>" ("peer unavailable: rank 2 ..."), or
// "ok". absl::Status::ToString() would append the machine-readable payloads as well.
std::string ErrorText(const absl::Status& status);

// Returns `status` with `context` prepended to its message ("context: message"), keeping its
// code and payloads. OK stays OK.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

// Shorthand used throughout the library.
#define CHORUS_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status chorus_status_ = (expr);          \
    if (!chorus_status_.ok()) return chorus_status_; \
  } while (0)

#define CHORUS_CONCAT_INNER_(a, b) a##b
#define CHORUS_CONCAT_(a, b) CHORUS_CONCAT_INNER_(a, b)
#define CHORUS_ASSIGN_OR_RETURN(lhs, expr) \
  CHORUS_ASSIGN_OR_RETURN_IMPL_(CHORUS_CONCAT_(chorus_statusor_, __LINE__), lhs, expr)
#define CHORUS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

}  // namespace chorus

#endif  // CHORUS_CORE_STATUS_H_
