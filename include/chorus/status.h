// Errors of the C++ API: a Status carries the kind a caller can branch on, the rank of the peer
// involved (or -1) and a message a person can act on; StatusOr<T> is a value or the Status that
// says why there is none.
//
//   chorus::StatusOr<chorus::Store> store = chorus::Store::Open("file:///shared/job42");
//   if (!store.ok()) { std::cerr << store.status().ToString() << "\n"; return 1; }
//
// Thread-safety: plain values; const methods may be called from any thread.
#ifndef CHORUS_STATUS_H_
#define CHORUS_STATUS_H_

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "chorus/chorus_c.h"

namespace chorus {
// The C++ API's names are versioned with the ABI's major version; users write chorus::Status.
inline namespace v0 {

enum class ErrorKind : int {
  kOk = CHORUS_OK,
  kDeadlineExceeded = CHORUS_ERR_DEADLINE_EXCEEDED,  // a blocking call ran past its deadline
  kPeerUnavailable = CHORUS_ERR_PEER_UNAVAILABLE,    // a peer or the store died or is unreachable
  kInvalidArgument = CHORUS_ERR_INVALID_ARGUMENT,    // the caller passed something unusable
  kAborted = CHORUS_ERR_ABORTED,                     // cancelled, or the communicator was aborted
  kMismatch = CHORUS_ERR_MISMATCH,                   // ranks disagree on a collective's shape
  kInternal = CHORUS_ERR_INTERNAL,                   // a bug or an unexpected system error
};

// "ok", "deadline exceeded", "peer unavailable", ...
inline const char* ErrorKindName(ErrorKind kind) {
  return chorus_error_name(static_cast<chorus_error_t>(kind));
}

class Status {
 public:
  // OK.
  Status() = default;
  Status(ErrorKind kind, std::string message, int peer_rank = -1)
      : kind_(kind), peer_rank_(peer_rank), message_(std::move(message)) {}

  bool ok() const { return kind_ == ErrorKind::kOk; }
  ErrorKind kind() const { return kind_; }
  // The peer involved in the failure, or -1.
  int peer_rank() const { return peer_rank_; }
  const std::string& message() const { return message_; }

  // "ok", or "<kind>: <message>".
  std::string ToString() const {
    return ok() ? "ok" : std::string(ErrorKindName(kind_)) + ": " + message_;
  }

 private:
  ErrorKind kind_ = ErrorKind::kOk;
  int peer_rank_ = -1;
  std::string message_;
};

template <typename T>
class StatusOr {
 public:
  // A failure; `status` must not be OK (an OK one becomes kInternal, which says so).
  // Implicit, so that a function returning StatusOr<T> can `return status;` or `return value;`.
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT(runtime/explicit)
    if (status_.ok()) status_ = Status(ErrorKind::kInternal, "StatusOr made from an OK Status");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT(runtime/explicit)

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  // The value; calling these on a failure prints the status and aborts (check ok() first).
  T& value() & { return Checked(), *value_; }
  const T& value() const& { return Checked(), *value_; }
  T&& value() && { return Checked(), std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void Checked() const {
    if (ok()) return;
    std::fprintf(stderr, "chorus::StatusOr::value() on an error: %s\n", status_.ToString().c_str());
    std::abort();
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace v0
}  // namespace chorus

#endif  // CHORUS_STATUS_H_
