#include "tests/reliability/timing_summary.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace chorus::testing {

std::string SummarizeSeconds(std::vector<double> seconds) {
  if (seconds.empty()) return "none";
  std::sort(seconds.begin(), seconds.end());
  return absl::StrFormat("min %.3f s, median %.3f s, max %.3f s over %d", seconds.front(),
                         seconds[seconds.size() / 2], seconds.back(), seconds.size());
}

}  // namespace chorus::testing
