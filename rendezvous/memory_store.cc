#include "chorus/rendezvous/memory_store.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chorus/core/status.h"

namespace chorus {

absl::Status MemoryStore::Set(absl::string_view key, absl::string_view value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[std::string(key)] = std::string(value);
  }
  changed_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::string> MemoryStore::Get(absl::string_view key, Deadline deadline) {
  const std::string owned(key);
  CHORUS_ASSIGN_OR_RETURN(std::vector<std::string> values,
                          MultiGet(absl::MakeConstSpan(&owned, 1), deadline));
  return std::move(values[0]);
}

absl::StatusOr<std::optional<std::string>> MemoryStore::TryGet(absl::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = values_.find(key);
  if (it == values_.end()) return std::optional<std::string>();
  return std::optional<std::string>(it->second);
}

absl::StatusOr<int64_t> MemoryStore::Add(absl::string_view key, int64_t delta) {
  int64_t current = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(key);
    if (it != values_.end() && !absl::SimpleAtoi(it->second, &current)) {
      return InvalidArgumentError(absl::StrCat("memory store: key '", key,
                                               "' holds a non-integer value; cannot add to it"));
    }
    current += delta;
    values_[std::string(key)] = absl::StrCat(current);
  }
  changed_.notify_all();
  return current;
}

absl::Status MemoryStore::Delete(absl::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = values_.find(key);
  if (it != values_.end()) values_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> MemoryStore::MultiGet(absl::Span<const std::string> keys,
                                                               Deadline deadline) {
  auto all_present = [this, keys]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const std::string& key : keys) {
      if (values_.find(key) == values_.end()) return false;
    }
    return true;
  };
  std::unique_lock<std::mutex> lock(mu_);
  bool ready = true;
  if (deadline.IsInfinite()) {
    changed_.wait(lock, all_present);
  } else {
    ready = changed_.wait_until(lock, deadline.time_point(), all_present);
  }
  if (!ready) {
    std::vector<std::string> missing;
    for (const std::string& key : keys) {
      if (values_.find(key) == values_.end()) missing.push_back(key);
    }
    return DeadlineExceededError(absl::StrCat(
        "memory store: keys [", absl::StrJoin(missing, ", "),
        "] were not set before the deadline; check that every rank started and uses the same "
        "store prefix"));
  }
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const std::string& key : keys) values.push_back(values_.find(key)->second);
  return values;
}

}  // namespace chorus
