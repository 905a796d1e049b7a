// A store in process memory, for tests that run ranks as threads of one process.
#ifndef CHORUS_RENDEZVOUS_MEMORY_STORE_H_
#define CHORUS_RENDEZVOUS_MEMORY_STORE_H_

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "chorus/rendezvous/store.h"

namespace chorus {

// Thread-safe; waiters block on a condition variable, not a poll loop. (std::mutex rather than
// absl::Mutex: the system Abseil is not built with ThreadSanitizer, so TSan cannot see
// absl::Mutex synchronise and would report false races; pthread-based std::mutex it sees.)
class MemoryStore : public Store {
 public:
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, Deadline deadline) override;
  absl::StatusOr<std::optional<std::string>> TryGet(absl::string_view key) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::Status Delete(absl::string_view key) override;
  absl::StatusOr<std::vector<std::string>> MultiGet(absl::Span<const std::string> keys,
                                                    Deadline deadline) override;
  std::string Describe() const override { return "memory store"; }

 private:
  std::mutex mu_;
  std::condition_variable changed_;  // notified on every Set and Add
  std::map<std::string, std::string, std::less<>> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace chorus

#endif  // CHORUS_RENDEZVOUS_MEMORY_STORE_H_
