#include "chorus/core/logging.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "chorus/core/env.h"

namespace chorus {
namespace {

constexpr absl::string_view kLevelNames[] = {"E", "W", "I", "D", "T"};

struct LogConfig {
  std::atomic<int> level{static_cast<int>(LogLevel::kWarn)};
  std::atomic<int> fd{STDERR_FILENO};
};

LogConfig& Config() {
  static LogConfig* config = [] {
    auto* c = new LogConfig;
    return c;
  }();
  return *config;
}

LogLevel ParseLevel(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "error") return LogLevel::kError;
  if (lower == "info") return LogLevel::kInfo;
  if (lower == "debug") return LogLevel::kDebug;
  if (lower == "trace") return LogLevel::kTrace;
  return LogLevel::kWarn;
}

std::once_flag& InitFlag() {
  static std::once_flag flag;
  return flag;
}
// Set once the configuration was first read: a check of the level then takes one load, where
// std::call_once alone costs tens of instructions on every log statement of every call.
std::atomic<bool> config_loaded{false};

thread_local int thread_log_rank = -1;

}  // namespace

void ReloadLogConfig() {
  LogConfig& config = Config();
  config.level.store(static_cast<int>(ParseLevel(GetEnv("CHORUS_LOG").value_or("warn"))));
  const auto file = GetEnv("CHORUS_LOG_FILE");
  int fd = STDERR_FILENO;
  if (file) {
    const std::string path = absl::StrCat(ExpandRankPattern(*file), ".", getpid(), ".log");
    const int opened = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (opened >= 0) fd = opened;
  }
  const int old = config.fd.exchange(fd);
  if (old != STDERR_FILENO && old != fd) close(old);
}

bool LogEnabled(LogLevel level) {
  if (!config_loaded.load(std::memory_order_acquire)) {
    std::call_once(InitFlag(), [] {
      ReloadLogConfig();
      config_loaded.store(true, std::memory_order_release);
    });
  }
  return static_cast<int>(level) <= Config().level.load(std::memory_order_relaxed);
}

void SetThreadLogRank(int rank) { thread_log_rank = rank; }
int ThreadLogRank() { return thread_log_rank; }

ScopedLogRank::ScopedLogRank(int rank) : saved_(thread_log_rank) { thread_log_rank = rank; }
ScopedLogRank::~ScopedLogRank() { thread_log_rank = saved_; }

std::string ClockText(absl::Time time) {
  // Looked up once: absl::LocalTimeZone() looks the zone up again on every call, behind a lock
  // of its own that ThreadSanitizer cannot see into (absl is not built with it), so threads
  // logging at once for the first time were reported as racing.
  static const absl::TimeZone zone = absl::LocalTimeZone();
  return absl::FormatTime("%H:%M:%E6S", time, zone);
}

void LogLine(LogLevel level, absl::string_view subsystem, absl::string_view message) {
  const std::string rank =
      thread_log_rank >= 0 ? absl::StrCat("rank ", thread_log_rank) : std::string("rank ?");
  const std::string line =
      absl::StrCat("[chorus ", kLevelNames[static_cast<int>(level)], " ", ClockText(absl::Now()),
                   " ", rank, " ", subsystem, "] ", message, "\n");
  // One write per line so lines from many threads and processes never interleave.
  const ssize_t ignored = write(Config().fd.load(), line.data(), line.size());
  (void)ignored;
}

}  // namespace chorus
