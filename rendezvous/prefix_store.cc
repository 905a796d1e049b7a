#include "chorus/rendezvous/prefix_store.h"

#include "absl/strings/str_cat.h"

namespace chorus {

PrefixStore::PrefixStore(absl::string_view prefix, Store& inner)
    : key_prefix_(absl::StrCat(prefix, "/")), inner_(inner) {}

PrefixStore::PrefixStore(absl::string_view prefix, std::shared_ptr<Store> inner)
    : key_prefix_(absl::StrCat(prefix, "/")), owned_(std::move(inner)), inner_(*owned_) {}

std::string PrefixStore::Prefixed(absl::string_view key) const {
  return absl::StrCat(key_prefix_, key);
}

std::vector<std::string> PrefixStore::Prefixed(absl::Span<const std::string> keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) out.push_back(Prefixed(key));
  return out;
}

absl::Status PrefixStore::Set(absl::string_view key, absl::string_view value) {
  return inner_.Set(Prefixed(key), value);
}

absl::StatusOr<std::string> PrefixStore::Get(absl::string_view key, Deadline deadline) {
  return inner_.Get(Prefixed(key), deadline);
}

absl::StatusOr<std::optional<std::string>> PrefixStore::TryGet(absl::string_view key) {
  return inner_.TryGet(Prefixed(key));
}

absl::StatusOr<int64_t> PrefixStore::Add(absl::string_view key, int64_t delta) {
  return inner_.Add(Prefixed(key), delta);
}

absl::Status PrefixStore::Delete(absl::string_view key) { return inner_.Delete(Prefixed(key)); }

absl::Status PrefixStore::MultiSet(absl::Span<const KeyValue> pairs) {
  std::vector<KeyValue> prefixed;
  prefixed.reserve(pairs.size());
  for (const KeyValue& pair : pairs) prefixed.emplace_back(Prefixed(pair.first), pair.second);
  return inner_.MultiSet(prefixed);
}

absl::StatusOr<std::vector<std::string>> PrefixStore::MultiGet(absl::Span<const std::string> keys,
                                                               Deadline deadline) {
  return inner_.MultiGet(Prefixed(keys), deadline);
}

absl::Status PrefixStore::Wait(absl::Span<const std::string> keys, Deadline deadline) {
  return inner_.Wait(Prefixed(keys), deadline);
}

std::string PrefixStore::Describe() const {
  return absl::StrCat(inner_.Describe(), " (key prefix '", key_prefix_, "')");
}

}  // namespace chorus
