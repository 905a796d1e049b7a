#include "chorus/core/status.h"

#include <catch2/catch.hpp>

#include "chorus/core/deadline.h"

namespace chorus {
namespace {

TEST_CASE("errors carry a kind and a peer rank a caller can branch on") {
  const absl::Status dead = PeerUnavailableError("rank 3 closed its connection", 3);
  CHECK(dead.code() == absl::StatusCode::kUnavailable);
  CHECK(GetErrorKind(dead) == ErrorKind::kPeerUnavailable);
  REQUIRE(ErrorPeerRank(dead).has_value());
  CHECK(*ErrorPeerRank(dead) == 3);

  const absl::Status mismatch = MismatchError("count 7 vs 8");
  CHECK(GetErrorKind(mismatch) == ErrorKind::kMismatch);
  CHECK_FALSE(ErrorPeerRank(mismatch).has_value());

  CHECK(GetErrorKind(absl::OkStatus()) == ErrorKind::kOk);
  CHECK(GetErrorKind(absl::DeadlineExceededError("x")) == ErrorKind::kDeadlineExceeded);
  CHECK(GetErrorKind(absl::CancelledError("x")) == ErrorKind::kAborted);
}

TEST_CASE("annotate keeps code and payloads") {
  const absl::Status base = DeadlineExceededError("no data", 2);
  const absl::Status annotated = Annotate(base, "allreduce #4");
  CHECK(annotated.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(annotated.message() == "allreduce #4: no data");
  CHECK(*ErrorPeerRank(annotated) == 2);
  CHECK(Annotate(absl::OkStatus(), "x").ok());
}

TEST_CASE("error text for people names the kind and carries no payload dump") {
  const absl::Status status = PeerUnavailableError("rank 2 is gone; check its log", 2);
  CHECK(ErrorText(status) == "peer unavailable: rank 2 is gone; check its log");
  CHECK(std::string(status.ToString()).find("chorus.dev/") != std::string::npos);
  CHECK(ErrorText(absl::OkStatus()) == "ok");
  CHECK(ErrorText(absl::NotFoundError("no such key")) == "internal: no such key");
}

TEST_CASE("deadlines") {
  CHECK(Deadline::Infinite().IsInfinite());
  CHECK_FALSE(Deadline::Infinite().Expired());
  CHECK(Deadline::After(absl::ZeroDuration()).Expired());
  const Deadline soon = Deadline::After(absl::Seconds(10));
  CHECK_FALSE(soon.Expired());
  CHECK(soon.Remaining() <= absl::Seconds(10));
  CHECK(soon.RemainingMillis(100) == 100);
  CHECK(Deadline::Infinite().Min(soon).time_point() == soon.time_point());
  CHECK(Deadline::After(absl::Milliseconds(-5)).RemainingMillis(100) == 0);
}

}  // namespace
}  // namespace chorus
