#include "chorus/core/host_identity.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <fstream>

#include "absl/strings/str_cat.h"

namespace chorus {
namespace {

std::string ReadFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Only hex digits (or only digits) survive, so identities never contain the ':' separator:
// boot id "1c0e...-..." -> "1c0e...", pid namespace "pid:[4026531836]" -> "4026531836".
std::string KeepDigits(absl::string_view text, bool hex) {
  std::string kept;
  for (char c : text) {
    if ((c >= '0' && c <= '9') || (hex && c >= 'a' && c <= 'f')) kept.push_back(c);
  }
  return kept;
}

}  // namespace

std::string NamespaceInode(absl::string_view name) {
  const std::string path = absl::StrCat("/proc/self/ns/", name);
  char link[128] = {0};
  const ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
  return KeepDigits(absl::string_view(link, n > 0 ? n : 0), false);
}

const std::string& LocalHostIdentity() {
  static const std::string* identity = [] {
    const std::string boot = KeepDigits(ReadFirstLine("/proc/sys/kernel/random/boot_id"), true);
    const std::string pid_ns = NamespaceInode("pid");
    return new std::string(
        absl::StrCat(boot.empty() ? "noboot" : boot, "/", pid_ns.empty() ? "nons" : pid_ns));
  }();
  return *identity;
}

bool ProcessRunning(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // "<pid> (<comm>) <state> ...": the name may hold spaces and parentheses, the state follows
  // the last ')'.
  const std::string stat = ReadFirstLine(absl::StrCat("/proc/", pid, "/stat").c_str());
  const size_t name_end = stat.rfind(')');
  if (name_end == std::string::npos || name_end + 2 >= stat.size()) return true;
  const char state = stat[name_end + 2];
  return state != 'Z' && state != 'X';
}

int UsableCores() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  return sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 0;
}

}  // namespace chorus
