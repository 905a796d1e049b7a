// Captures Chorus logging in tests: while alive, lines of `level` (default info) and above go
// to files under a temporary directory instead of stderr, for the test to read.
#ifndef CHORUS_TESTS_TRANSPORT_CAPTURED_LOG_H_
#define CHORUS_TESTS_TRANSPORT_CAPTURED_LOG_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

#include "tests/harness/multirank.h"

namespace chorus::testing {

// Only create it while no device exists: reloading the configuration races with loggers.
class CapturedLog {
 public:
  explicit CapturedLog(const char* level = "info");
  ~CapturedLog();
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  // Everything logged so far, all files concatenated.
  std::string Read() const;
  // Read(), once it contains `text` or `timeout` has passed: for lines another thread logs
  // after the test has seen the outcome.
  std::string ReadOnce(absl::string_view text, absl::Duration timeout = absl::Seconds(3)) const;

 private:
  TempDir directory_;
  std::optional<std::string> saved_level_;
  std::optional<std::string> saved_file_;
};

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_TRANSPORT_CAPTURED_LOG_H_
