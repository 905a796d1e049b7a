// Reading CHORUS_* environment variables. Every variable read anywhere in Chorus goes through
// these helpers and is listed in docs/configuration.md.
#ifndef CHORUS_CORE_ENV_H_
#define CHORUS_CORE_ENV_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace chorus {

// The variable's value, or nullopt when unset or empty.
std::optional<std::string> GetEnv(absl::string_view name);

// An integer variable; `fallback` when unset; InvalidArgument naming the variable when set to
// something that is not an integer in [min_value, max_value].
absl::StatusOr<int64_t> GetEnvInt(absl::string_view name, int64_t fallback, int64_t min_value,
                                  int64_t max_value);

// A size variable accepting suffixes k, m, g (powers of 1024): "64k", "4M", "1048576".
absl::StatusOr<int64_t> GetEnvBytes(absl::string_view name, int64_t fallback);

// A duration in milliseconds, or with a unit: "1500", "30s", "250ms", "2m".
absl::StatusOr<absl::Duration> GetEnvDuration(absl::string_view name, absl::Duration fallback);

// `pattern` with each "%r" replaced by `rank`, or when `rank` is negative by CHORUS_RANK (else
// RANK, else "x"): how CHORUS_LOG_FILE and the observability files name one file per rank.
std::string ExpandRankPattern(absl::string_view pattern, int rank = -1);

// Parses the size grammar above ("64k", "4M", "inf" -> INT64_MAX); used by GetEnvBytes and by
// option strings that carry sizes.
absl::StatusOr<int64_t> ParseBytes(absl::string_view text);

}  // namespace chorus

#endif  // CHORUS_CORE_ENV_H_
