#include "chorus/rendezvous/store_support.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"

namespace chorus {

absl::Status ValidateKey(absl::string_view key, absl::string_view store) {
  if (key.size() <= kMaxKeyBytes) return absl::OkStatus();
  return InvalidArgumentError(absl::StrCat(store, ": key '", absl::CHexEscape(key.substr(0, 64)),
                                           "...' is ", key.size(), " bytes; keys are at most ",
                                           kMaxKeyBytes, " bytes"));
}

bool PollBackoff::SleepBefore(const Deadline& deadline) {
  const absl::Duration left = deadline.Remaining();
  if (left <= absl::ZeroDuration()) return false;
  absl::SleepFor(std::min(next_, left));
  next_ = std::min(next_ * 2, max_);
  return true;
}

std::string DescribeKeys(absl::Span<const std::string> keys, size_t limit) {
  std::string out;
  const size_t shown = std::min(keys.size(), limit);
  for (size_t i = 0; i < shown; ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ", ", "'", absl::CHexEscape(keys[i]), "'");
  }
  if (keys.size() > shown) absl::StrAppend(&out, " and ", keys.size() - shown, " more");
  return out;
}

}  // namespace chorus
