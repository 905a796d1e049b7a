// Summaries of measured durations for the tests' WARN lines (docs/reliability.md quotes them).
#ifndef CHORUS_TESTS_RELIABILITY_TIMING_SUMMARY_H_
#define CHORUS_TESTS_RELIABILITY_TIMING_SUMMARY_H_

#include <string>
#include <vector>

namespace chorus::testing {

// "min 0.012 s, median 0.020 s, max 0.031 s over 3"; "none" when empty.
std::string SummarizeSeconds(std::vector<double> seconds);

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_RELIABILITY_TIMING_SUMMARY_H_
