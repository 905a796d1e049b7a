#include "chorus/core/env.h"

#include <cstdlib>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "chorus/core/status.h"

namespace chorus {

std::optional<std::string> GetEnv(absl::string_view name) {
  const char* value = std::getenv(std::string(name).c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::string ExpandRankPattern(absl::string_view pattern, int rank) {
  const std::string text =
      rank >= 0 ? absl::StrCat(rank) : GetEnv("CHORUS_RANK").value_or(GetEnv("RANK").value_or("x"));
  return absl::StrReplaceAll(pattern, {{"%r", text}});
}

absl::StatusOr<int64_t> GetEnvInt(absl::string_view name, int64_t fallback, int64_t min_value,
                                  int64_t max_value) {
  const auto text = GetEnv(name);
  if (!text) return fallback;
  int64_t value = 0;
  if (!absl::SimpleAtoi(*text, &value) || value < min_value || value > max_value) {
    return InvalidArgumentError(absl::StrCat(name, "='", *text, "' is not an integer in [",
                                             min_value, ", ", max_value, "]"));
  }
  return value;
}

absl::StatusOr<int64_t> ParseBytes(absl::string_view text) {
  std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (lower == "inf" || lower == "max") return std::numeric_limits<int64_t>::max();
  int64_t multiplier = 1;
  if (!lower.empty() && lower.back() == 'b') lower.pop_back();  // "64kb", "1mb"
  if (!lower.empty()) {
    switch (lower.back()) {
      case 'k':
        multiplier = int64_t{1} << 10;
        break;
      case 'm':
        multiplier = int64_t{1} << 20;
        break;
      case 'g':
        multiplier = int64_t{1} << 30;
        break;
      default:
        break;
    }
    if (multiplier != 1) lower.pop_back();
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(lower, &value) || value < 0 ||
      value > std::numeric_limits<int64_t>::max() / multiplier) {
    return InvalidArgumentError(
        absl::StrCat("'", text, "' is not a byte size (examples: 4096, 64k, 4M, 1G, inf)"));
  }
  return value * multiplier;
}

absl::StatusOr<int64_t> GetEnvBytes(absl::string_view name, int64_t fallback) {
  const auto text = GetEnv(name);
  if (!text) return fallback;
  auto value = ParseBytes(*text);
  if (!value.ok()) return Annotate(value.status(), name);
  return value;
}

absl::StatusOr<absl::Duration> GetEnvDuration(absl::string_view name, absl::Duration fallback) {
  const auto text = GetEnv(name);
  if (!text) return fallback;
  int64_t ms = 0;
  if (absl::SimpleAtoi(*text, &ms) && ms >= 0) return absl::Milliseconds(ms);
  absl::Duration duration;
  if (absl::ParseDuration(*text, &duration) && duration >= absl::ZeroDuration()) return duration;
  return InvalidArgumentError(absl::StrCat(name, "='", *text,
                                           "' is not a duration (examples: 1500 for ms, 30s, "
                                           "250ms, 2m)"));
}

}  // namespace chorus
