// The calling thread pinned to the first core it may run on, for one scope: threads it starts
// meanwhile inherit that affinity, so ranks made there count one usable core (UsableCores) and
// run on it, as ranks that outnumber a host's cores do. The destructor restores the affinity.
#ifndef CHORUS_TESTS_TRANSPORT_SCOPED_ONE_CORE_H_
#define CHORUS_TESTS_TRANSPORT_SCOPED_ONE_CORE_H_

#include <sched.h>

#include <cstdio>
#include <cstdlib>

namespace chorus::testing {

class ScopedOneCore {
 public:
  ScopedOneCore() {
    Require(sched_getaffinity(0, sizeof(saved_), &saved_) == 0, "sched_getaffinity");
    cpu_set_t first;
    CPU_ZERO(&first);
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &saved_)) {
        CPU_SET(cpu, &first);
        break;
      }
    }
    Require(sched_setaffinity(0, sizeof(first), &first) == 0, "sched_setaffinity");
  }
  ScopedOneCore(const ScopedOneCore&) = delete;
  ScopedOneCore& operator=(const ScopedOneCore&) = delete;
  ~ScopedOneCore() { Require(sched_setaffinity(0, sizeof(saved_), &saved_) == 0, "restoring"); }

 private:
  // A test that cannot set the affinity it describes would check nothing: it stops.
  static void Require(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "ScopedOneCore: %s failed\n", what);
    std::abort();
  }

  cpu_set_t saved_;
};

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_TRANSPORT_SCOPED_ONE_CORE_H_
