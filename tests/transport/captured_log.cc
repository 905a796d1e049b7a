#include "tests/transport/captured_log.h"

#include <dirent.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/deadline.h"
#include "chorus/core/logging.h"

namespace chorus::testing {
namespace {

std::optional<std::string> SaveEnv(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
}

void RestoreEnv(const char* name, const std::optional<std::string>& value) {
  if (value) {
    setenv(name, value->c_str(), 1);
  } else {
    unsetenv(name);
  }
}

}  // namespace

CapturedLog::CapturedLog(const char* level)
    : saved_level_(SaveEnv("CHORUS_LOG")), saved_file_(SaveEnv("CHORUS_LOG_FILE")) {
  setenv("CHORUS_LOG", level, 1);
  setenv("CHORUS_LOG_FILE", absl::StrCat(directory_.path(), "/log").c_str(), 1);
  ReloadLogConfig();
}

CapturedLog::~CapturedLog() {
  RestoreEnv("CHORUS_LOG", saved_level_);
  RestoreEnv("CHORUS_LOG_FILE", saved_file_);
  ReloadLogConfig();
}

std::string CapturedLog::Read() const {
  std::string text;
  DIR* dir = opendir(directory_.path().c_str());
  while (dirent* entry = dir != nullptr ? readdir(dir) : nullptr) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream file(absl::StrCat(directory_.path(), "/", entry->d_name));
    std::stringstream content;
    content << file.rdbuf();
    text += content.str();
  }
  if (dir != nullptr) closedir(dir);
  return text;
}

std::string CapturedLog::ReadOnce(absl::string_view text, absl::Duration timeout) const {
  const Deadline deadline = Deadline::After(timeout);
  std::string content = Read();
  while (!absl::StrContains(content, text) && !deadline.Expired()) {
    absl::SleepFor(absl::Milliseconds(10));
    content = Read();
  }
  return content;
}

}  // namespace chorus::testing
