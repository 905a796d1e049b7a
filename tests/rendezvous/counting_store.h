// A store decorator that counts the operations made through it, to check how many store round
// trips an algorithm costs.
#ifndef CHORUS_TESTS_RENDEZVOUS_COUNTING_STORE_H_
#define CHORUS_TESTS_RENDEZVOUS_COUNTING_STORE_H_

#include <atomic>
#include <string>

#include "chorus/rendezvous/store.h"

namespace chorus::testing {

// Thread-safe. `operations` counts calls (round trips); `keys` counts keys named in them.
class CountingStore : public Store {
 public:
  explicit CountingStore(Store& inner) : inner_(inner) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override {
    Count(1);
    return inner_.Set(key, value);
  }
  absl::StatusOr<std::string> Get(absl::string_view key, Deadline deadline) override {
    Count(1);
    return inner_.Get(key, deadline);
  }
  absl::StatusOr<std::optional<std::string>> TryGet(absl::string_view key) override {
    Count(1);
    return inner_.TryGet(key);
  }
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override {
    Count(1);
    return inner_.Add(key, delta);
  }
  absl::Status Delete(absl::string_view key) override {
    Count(1);
    return inner_.Delete(key);
  }
  absl::Status MultiSet(absl::Span<const KeyValue> pairs) override {
    Count(pairs.size());
    return inner_.MultiSet(pairs);
  }
  absl::StatusOr<std::vector<std::string>> MultiGet(absl::Span<const std::string> keys,
                                                    Deadline deadline) override {
    Count(keys.size());
    return inner_.MultiGet(keys, deadline);
  }
  absl::Status Wait(absl::Span<const std::string> keys, Deadline deadline) override {
    Count(keys.size());
    return inner_.Wait(keys, deadline);
  }
  std::string Describe() const override { return "counting " + inner_.Describe(); }

  int64_t operations() const { return operations_.load(); }
  int64_t keys() const { return keys_.load(); }

 private:
  void Count(size_t keys) {
    operations_.fetch_add(1);
    keys_.fetch_add(static_cast<int64_t>(keys));
  }

  Store& inner_;
  std::atomic<int64_t> operations_{0};
  std::atomic<int64_t> keys_{0};
};

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_RENDEZVOUS_COUNTING_STORE_H_
