// CHORUS_LOG filters lines by level; every line carries the level, the time, the thread's
// rank and the subsystem; CHORUS_LOG_FILE names one file per process, "%r" being the rank.
#include "chorus/core/logging.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "chorus/core/env.h"
#include "tests/harness/multirank.h"

namespace chorus {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream content;
  content << file.rdbuf();
  return content.str();
}

// Logs one line per level at `level`, as rank 3, into a fresh file; returns the file's text.
std::string LogEveryLevel(const std::string& dir, const std::string& level) {
  setenv("CHORUS_LOG", level.c_str(), 1);
  setenv("CHORUS_LOG_FILE", absl::StrCat(dir, "/", level, ".%r").c_str(), 1);
  setenv("CHORUS_RANK", "3", 1);
  ReloadLogConfig();
  {
    ScopedLogRank rank(3);
    CHORUS_LOG(kError, "unit") << "an error";
    CHORUS_LOG(kWarn, "unit") << "a warning";
    CHORUS_LOG(kInfo, "unit") << "some info";
    CHORUS_LOG(kDebug, "unit") << "a debug line";
    CHORUS_LOG(kTrace, "unit") << "a trace line";
  }
  unsetenv("CHORUS_LOG");
  unsetenv("CHORUS_LOG_FILE");
  unsetenv("CHORUS_RANK");
  ReloadLogConfig();
  return ReadFile(absl::StrCat(dir, "/", level, ".3.", getpid(), ".log"));
}

TEST_CASE("CHORUS_LOG keeps the lines at or above its level", "[logging]") {
  testing::TempDir dir;
  const std::string info = LogEveryLevel(dir.path(), "info");
  CHECK(info.find("an error") != std::string::npos);
  CHECK(info.find("a warning") != std::string::npos);
  CHECK(info.find("some info") != std::string::npos);
  CHECK(info.find("a debug line") == std::string::npos);
  CHECK(info.find("a trace line") == std::string::npos);

  const std::string error = LogEveryLevel(dir.path(), "error");
  CHECK(error.find("an error") != std::string::npos);
  CHECK(error.find("a warning") == std::string::npos);

  const std::string trace = LogEveryLevel(dir.path(), "trace");
  CHECK(trace.find("a trace line") != std::string::npos);
}

TEST_CASE("a log line carries its level, time, rank and subsystem", "[logging]") {
  testing::TempDir dir;
  const std::string text = LogEveryLevel(dir.path(), "info");
  INFO(text);
  const std::regex line(R"(\[chorus (E|W|I) \d\d:\d\d:\d\d\.\d{6} rank 3 unit\] .+)");
  std::istringstream lines(text);
  int count = 0;
  for (std::string one; std::getline(lines, one); ++count) CHECK(std::regex_match(one, line));
  CHECK(count == 3);
}

TEST_CASE("ScopedLogRank restores the thread's rank", "[logging]") {
  SetThreadLogRank(-1);
  {
    ScopedLogRank outer(2);
    CHECK(ThreadLogRank() == 2);
    {
      ScopedLogRank inner(5);
      CHECK(ThreadLogRank() == 5);
    }
    CHECK(ThreadLogRank() == 2);
  }
  CHECK(ThreadLogRank() == -1);
}

TEST_CASE("ExpandRankPattern uses the given rank, else CHORUS_RANK", "[logging]") {
  CHECK(ExpandRankPattern("/tmp/x.%r.json", 4) == "/tmp/x.4.json");
  setenv("CHORUS_RANK", "7", 1);
  CHECK(ExpandRankPattern("/tmp/x.%r") == "/tmp/x.7");
  unsetenv("CHORUS_RANK");
  CHECK(ExpandRankPattern("/tmp/plain") == "/tmp/plain");
}

}  // namespace
}  // namespace chorus
