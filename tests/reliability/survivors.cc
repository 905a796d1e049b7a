#include "tests/reliability/survivors.h"

#include <signal.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"

namespace chorus::testing {

absl::StatusOr<std::vector<int>> Survivors(const std::vector<ProcessOutcome>& outcomes,
                                           int victim) {
  std::vector<int> survivors;
  std::string wrong;
  for (const ProcessOutcome& outcome : outcomes) {
    const bool expected = outcome.rank == victim ? outcome.term_signal == SIGKILL : outcome.ok();
    if (!expected) absl::StrAppend(&wrong, wrong.empty() ? "" : "; ", outcome.Describe());
    if (outcome.rank != victim && expected) survivors.push_back(outcome.rank);
  }
  if (!wrong.empty()) return InternalError(wrong);
  return survivors;
}

}  // namespace chorus::testing
