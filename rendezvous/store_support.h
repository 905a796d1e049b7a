// Helpers shared by the store implementations that talk to something outside the process (the
// file store, the Redis store): key validation, a bounded polling backoff and a readable list
// of the keys a wait is still missing.
#ifndef CHORUS_RENDEZVOUS_STORE_SUPPORT_H_
#define CHORUS_RENDEZVOUS_STORE_SUPPORT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "chorus/core/deadline.h"

namespace chorus {

// The longest key a store accepts (see store.h).
inline constexpr size_t kMaxKeyBytes = 512;

// InvalidArgument naming `store` when `key` is longer than kMaxKeyBytes.
absl::Status ValidateKey(absl::string_view key, absl::string_view store);

// Exponential backoff between polls: starts at `initial`, doubles up to `max`. A fresh poll
// loop starts fast (a key usually appears soon after the first miss) and settles at a rate that
// does not load the store. Not thread-safe: one per poll loop.
class PollBackoff {
 public:
  PollBackoff(absl::Duration initial, absl::Duration max) : next_(initial), max_(max) {}

  // Sleeps for the current interval, never past `deadline`, and grows the interval. Returns
  // false without sleeping when the deadline has already passed.
  bool SleepBefore(const Deadline& deadline);

 private:
  absl::Duration next_;
  absl::Duration max_;
};

// "'a', 'b', 'c' and 12 more": keys quoted and C-escaped (they may hold any bytes), at most
// `limit` of them spelled out, so an error message stays readable with thousands of keys.
std::string DescribeKeys(absl::Span<const std::string> keys, size_t limit = 8);

}  // namespace chorus

#endif  // CHORUS_RENDEZVOUS_STORE_SUPPORT_H_
