#include "chorus/benchmarks/machine_limits.h"

#include <catch2/catch.hpp>
#include <chrono>

#include "chorus/core/status.h"

namespace chorus::bench {
namespace {

// The probe's budgets add up to ~6 s. Instrumented builds run its memory loops and buffer
// fills 5-20x slower (each pass must still finish), so they get a looser bound.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr double kDefaultProbeBoundSeconds = 90;
#else
constexpr double kDefaultProbeBoundSeconds = 15;
#endif

TEST_CASE("the default probe measures every limit within its time bound") {
  const auto start = std::chrono::steady_clock::now();
  const auto limits = ProbeMachineLimits();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(limits.ok());
  // Allow for a loaded two-core machine but not for a hang.
  CHECK(seconds < kDefaultProbeBoundSeconds);
  CHECK(absl::ToDoubleSeconds(limits->probe_time) <= seconds);
  CHECK(limits->memcpy_gbps > 0.1);
  CHECK(limits->reduce_float_sum_gbps > 0.1);
  CHECK(limits->tcp_one_way_gbps > 0.01);
  CHECK(limits->tcp_bidirectional_gbps_per_direction > 0.01);
  CHECK(limits->tcp_one_way_bytes > 0);
  CHECK(limits->tcp_bidirectional_bytes > 0);
  CHECK(limits->tcp_rtt_median_us > 0);
  CHECK(limits->tcp_rtt_median_us < 100000);
  CHECK(limits->rtt_samples > 0);
  // The two floors: measured, and within bounds no machine misses by much.
  CHECK(limits->tcp_rtt_busy_poll_median_us > 0);
  CHECK(limits->tcp_rtt_busy_poll_median_us < 100000);
  CHECK(limits->cache_line_handoff_median_ns > 0);
  CHECK(limits->cache_line_handoff_median_ns < 1e6);
}

TEST_CASE("byte counts and round trips stop at the budget or the requested amount") {
  MachineLimitsOptions options;
  options.memory_buffer_bytes = 1 << 20;
  options.memory_budget = absl::Milliseconds(20);
  options.tcp_bytes = 3 << 20;
  options.rtt_round_trips = 10;
  const auto limits = ProbeMachineLimits(options);
  REQUIRE(limits.ok());
  CHECK(limits->tcp_one_way_bytes == 3 << 20);
  CHECK(limits->tcp_bidirectional_bytes == 3 << 20);
  CHECK(limits->rtt_samples == 10);
}

TEST_CASE("a probe with no time budget still measures at least one pass") {
  MachineLimitsOptions options;
  options.memory_buffer_bytes = 1 << 20;
  options.memory_budget = absl::ZeroDuration();
  options.tcp_bytes = int64_t{1} << 40;  // far more than can move in the budget
  options.tcp_budget = absl::Milliseconds(100);
  options.rtt_budget = absl::Milliseconds(50);
  const auto start = std::chrono::steady_clock::now();
  const auto limits = ProbeMachineLimits(options);
  REQUIRE(limits.ok());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK(limits->memcpy_gbps > 0);
  CHECK(limits->tcp_one_way_bytes > 0);
  CHECK(limits->tcp_one_way_bytes < (int64_t{1} << 40));
}

TEST_CASE("unusable options are refused") {
  MachineLimitsOptions options;
  options.rtt_round_trips = 0;
  const auto limits = ProbeMachineLimits(options);
  CHECK(GetErrorKind(limits.status()) == ErrorKind::kInvalidArgument);
}

TEST_CASE("the printed description names every limit and its unit") {
  MachineLimits limits;
  limits.memcpy_gbps = 12.5;
  limits.tcp_rtt_median_us = 17.25;
  limits.rtt_samples = 42;
  limits.tcp_rtt_busy_poll_median_us = 8.5;
  limits.cache_line_handoff_median_ns = 150;
  MachineDescription machine;
  machine.hostname = "host1";
  machine.online_cores = 2;
  const std::string text = FormatMachine(machine, limits);
  CHECK(text.find("host1") != std::string::npos);
  CHECK(text.find("memcpy 1 core") != std::string::npos);
  CHECK(text.find("12.50 GB/s") != std::string::npos);
  CHECK(text.find("17.2 us") != std::string::npos);
  CHECK(text.find("median of 42") != std::string::npos);
  CHECK(text.find("per direction") != std::string::npos);
  CHECK(text.find("8.5 us") != std::string::npos);
  CHECK(text.find("150 ns") != std::string::npos);
}

TEST_CASE("the machine description comes from the kernel") {
  const MachineDescription machine = DescribeMachine();
  CHECK(!machine.hostname.empty());
  CHECK(machine.online_cores >= 1);
  CHECK(machine.memory_bytes > 0);
  CHECK(machine.kernel.find("Linux") == 0);
}

}  // namespace
}  // namespace chorus::bench
