// FUZZ_CHECK: the property check of the fuzz targets. A violated property aborts, which
// libFuzzer reports as a crash (saving the input) and which fails the corpus replay test.
#ifndef CHORUS_TESTS_FUZZ_FUZZ_CHECK_H_
#define CHORUS_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(condition)                                                                 \
  do {                                                                                        \
    if (!(condition)) {                                                                       \
      std::fprintf(stderr, "%s:%d: property violated: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                           \
    }                                                                                         \
  } while (false)

#endif  // CHORUS_TESTS_FUZZ_FUZZ_CHECK_H_
