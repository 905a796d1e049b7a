// This process's resident memory and open file descriptors, for leak bounds.
#ifndef CHORUS_TESTS_RELIABILITY_PROCESS_USAGE_H_
#define CHORUS_TESTS_RELIABILITY_PROCESS_USAGE_H_

#include <cstdint>

namespace chorus::testing {

struct ProcessUsage {
  int64_t rss_bytes = 0;  // VmRSS of /proc/self/status
  int open_fds = 0;       // entries of /proc/self/fd

  static ProcessUsage Now();
};

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_RELIABILITY_PROCESS_USAGE_H_
