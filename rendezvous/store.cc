#include "chorus/rendezvous/store.h"

namespace chorus {

absl::Status Store::MultiSet(absl::Span<const KeyValue> pairs) {
  for (const KeyValue& pair : pairs) {
    absl::Status status = Set(pair.first, pair.second);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Store::MultiGet(absl::Span<const std::string> keys,
                                                         Deadline deadline) {
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const std::string& key : keys) {
    absl::StatusOr<std::string> value = Get(key, deadline);
    if (!value.ok()) return value.status();
    values.push_back(*std::move(value));
  }
  return values;
}

absl::Status Store::Wait(absl::Span<const std::string> keys, Deadline deadline) {
  return MultiGet(keys, deadline).status();
}

}  // namespace chorus
