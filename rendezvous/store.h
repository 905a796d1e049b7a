// The key-value store through which ranks find each other (rendezvous). Implementations: a
// real Redis server (redis_store.h), a shared directory (file_store.h), process memory
// (memory_store.h) and a key prefix over any of them (prefix_store.h).
#ifndef CHORUS_RENDEZVOUS_STORE_H_
#define CHORUS_RENDEZVOUS_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "chorus/core/deadline.h"

namespace chorus {

using KeyValue = std::pair<std::string, std::string>;

// Thread-safe: every method may be called from many threads at once, and (for the file and
// Redis stores) from many processes at once. Keys and values are arbitrary bytes; keys are at
// most 512 bytes. Errors: kPeerUnavailable when the backing service cannot be reached (after
// the implementation's bounded retries), kDeadlineExceeded naming the missing keys when a wait
// runs out, kInvalidArgument for unusable keys.
class Store {
 public:
  virtual ~Store() = default;

  // Stores `value` under `key`, replacing any previous value. Readers see the old value or the
  // new one, never a mix.
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;

  // The value of `key`, waiting until it exists or `deadline` passes.
  virtual absl::StatusOr<std::string> Get(absl::string_view key, Deadline deadline) = 0;

  // The value of `key` if it exists now; nullopt if not. Never waits.
  virtual absl::StatusOr<std::optional<std::string>> TryGet(absl::string_view key) = 0;

  // Atomically adds `delta` to the integer stored under `key` (absent counts as 0) and returns
  // the new value. Correct when many processes add concurrently.
  virtual absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) = 0;

  // Removes `key`; removing an absent key is not an error.
  virtual absl::Status Delete(absl::string_view key) = 0;

  // Sets every pair. The default sets them one by one; stores with a batch primitive override.
  virtual absl::Status MultiSet(absl::Span<const KeyValue> pairs);

  // The values of all `keys`, in order, waiting until all exist or `deadline` passes. The
  // default gets them one by one; stores with a batch primitive override.
  virtual absl::StatusOr<std::vector<std::string>> MultiGet(absl::Span<const std::string> keys,
                                                            Deadline deadline);

  // Waits until all `keys` exist. The default calls MultiGet and drops the values.
  virtual absl::Status Wait(absl::Span<const std::string> keys, Deadline deadline);

  // A short description for error messages, e.g. "file store /tmp/run1" or
  // "redis store 127.0.0.1:6379".
  virtual std::string Describe() const = 0;
};

}  // namespace chorus

#endif  // CHORUS_RENDEZVOUS_STORE_H_
