// A view of another store in which every key is prefixed with "<prefix>/", so one store serves
// many communicators (or many jobs) without their keys colliding.
#ifndef CHORUS_RENDEZVOUS_PREFIX_STORE_H_
#define CHORUS_RENDEZVOUS_PREFIX_STORE_H_

#include <memory>
#include <string>

#include "chorus/rendezvous/store.h"

namespace chorus {

// Thread-safe when the inner store is (every store is). Errors come from the inner store and
// name the full, prefixed keys, which is what an operator finds in the store.
class PrefixStore : public Store {
 public:
  // Borrows `inner`, which must outlive this store.
  PrefixStore(absl::string_view prefix, Store& inner);
  // Owns `inner`, alone (from a unique_ptr) or with others (a sub-communicator's keys inside
  // its parent's).
  PrefixStore(absl::string_view prefix, std::shared_ptr<Store> inner);

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, Deadline deadline) override;
  absl::StatusOr<std::optional<std::string>> TryGet(absl::string_view key) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::Status Delete(absl::string_view key) override;
  absl::Status MultiSet(absl::Span<const KeyValue> pairs) override;
  absl::StatusOr<std::vector<std::string>> MultiGet(absl::Span<const std::string> keys,
                                                    Deadline deadline) override;
  absl::Status Wait(absl::Span<const std::string> keys, Deadline deadline) override;
  std::string Describe() const override;

  // "<prefix>/", the string put in front of every key.
  const std::string& key_prefix() const { return key_prefix_; }

 private:
  std::string Prefixed(absl::string_view key) const;
  std::vector<std::string> Prefixed(absl::Span<const std::string> keys) const;

  const std::string key_prefix_;
  std::shared_ptr<Store> owned_;
  Store& inner_;
};

}  // namespace chorus

#endif  // CHORUS_RENDEZVOUS_PREFIX_STORE_H_
