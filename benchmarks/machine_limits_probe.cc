// Prints this machine's description and measured limits (see machine_limits.h).
#include <cstdio>

#include "chorus/benchmarks/machine_limits.h"
#include "chorus/core/status.h"

int main() {
  const auto limits = chorus::bench::ProbeMachineLimits();
  if (!limits.ok()) {
    std::fprintf(stderr, "%s\n", chorus::ErrorText(limits.status()).c_str());
    return 1;
  }
  std::fputs(chorus::bench::FormatMachine(chorus::bench::DescribeMachine(), *limits).c_str(),
             stdout);
  return 0;
}
