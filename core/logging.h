// Levelled logging with the subsystem and rank on each line.
//
//   CHORUS_LOG=error|warn|info|debug|trace   (default warn)
//   CHORUS_LOG_FILE=/path/prefix             one file per process: /path/prefix.<pid>.log;
//                                            "%r" in the value is replaced by CHORUS_RANK/RANK
//
// Usage: CHORUS_LOG(kInfo, "tcp") << "listening on " << address;
// Thread-safe: each line is written with one write(2).
#ifndef CHORUS_CORE_LOGGING_H_
#define CHORUS_CORE_LOGGING_H_

#include <sstream>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace chorus {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, absl::string_view subsystem, absl::string_view message);

// `time` as HH:MM:SS.ffffff in the local time zone, as log lines show it.
std::string ClockText(absl::Time time);

// The rank shown on log lines written by the calling thread (-1: none). Threads that act for
// a rank (rank threads in tests, transport progress threads) set it once.
void SetThreadLogRank(int rank);
int ThreadLogRank();

// Sets the calling thread's log rank for its lifetime and then restores the previous one: for
// calls that act for a rank on a thread the caller owns (a user thread in a blocking
// collective), which must not keep the rank afterwards.
class ScopedLogRank {
 public:
  explicit ScopedLogRank(int rank);
  ~ScopedLogRank();
  ScopedLogRank(const ScopedLogRank&) = delete;
  ScopedLogRank& operator=(const ScopedLogRank&) = delete;

 private:
  int saved_;
};

// Re-reads CHORUS_LOG and CHORUS_LOG_FILE (tests change them at run time).
void ReloadLogConfig();

class LogStream {
 public:
  LogStream(LogLevel level, absl::string_view subsystem) : level_(level), subsystem_(subsystem) {}
  ~LogStream() { LogLine(level_, subsystem_, stream_.str()); }
  LogStream(const LogStream&) = delete;
  LogStream& operator=(const LogStream&) = delete;

  template <typename T>
  LogStream& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  LogLevel level_;
  absl::string_view subsystem_;
  std::ostringstream stream_;
};

}  // namespace chorus

#define CHORUS_LOG(level, subsystem)                      \
  if (!::chorus::LogEnabled(::chorus::LogLevel::level)) { \
  } else                                                  \
    ::chorus::LogStream(::chorus::LogLevel::level, subsystem)

#endif  // CHORUS_CORE_LOGGING_H_
