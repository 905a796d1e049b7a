// Reading the outcomes of a run where one forked rank was killed on purpose.
#ifndef CHORUS_TESTS_RELIABILITY_SURVIVORS_H_
#define CHORUS_TESTS_RELIABILITY_SURVIVORS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "tests/harness/multirank.h"

namespace chorus::testing {

// The ranks other than `victim`, in order, when the victim died of SIGKILL and every other
// rank exited OK; otherwise an error describing every outcome that is not so.
absl::StatusOr<std::vector<int>> Survivors(const std::vector<ProcessOutcome>& outcomes, int victim);

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_RELIABILITY_SURVIVORS_H_
