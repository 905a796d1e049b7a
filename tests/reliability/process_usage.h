// This process's resident memory, heap in use and open file descriptors, for leak bounds. The
// heap figure tells a leak (it grows) from allocator fragmentation (only RSS grows).
#ifndef CHORUS_TESTS_RELIABILITY_PROCESS_USAGE_H_
#define CHORUS_TESTS_RELIABILITY_PROCESS_USAGE_H_

#include <cstdint>

namespace chorus::testing {

struct ProcessUsage {
  int64_t rss_bytes = 0;   // VmRSS of /proc/self/status
  int open_fds = 0;        // entries of /proc/self/fd
  int64_t heap_bytes = 0;  // malloc'd and not yet freed (glibc's mallinfo2, all arenas)

  static ProcessUsage Now();
};

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_RELIABILITY_PROCESS_USAGE_H_
