#include "tests/reliability/process_usage.h"

#include <malloc.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace chorus::testing {

ProcessUsage ProcessUsage::Now() {
  ProcessUsage usage;
  std::ifstream status("/proc/self/status");
  std::string field;
  while (status >> field) {
    if (field == "VmRSS:") {
      status >> usage.rss_bytes;  // in kB
      usage.rss_bytes *= 1024;
      break;
    }
  }
  // The directory iterator's own descriptor is counted at both ends alike.
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)entry;
    ++usage.open_fds;
  }
  usage.heap_bytes = static_cast<int64_t>(mallinfo2().uordblks);
  return usage;
}

}  // namespace chorus::testing
