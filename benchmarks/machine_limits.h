// The ceilings of the machine a benchmark runs on, measured in the same run, so that a
// collective's bandwidth can be read as a fraction of what this host can do at all:
//
//   memcpy        one core copying a large buffer: bytes copied per second
//   reduce        one core computing c[i] = a[i] + b[i] over large float32 buffers: bytes of
//                 output per second (the loop reads 2 bytes and writes 1 per output byte)
//   tcp one-way   one loopback TCP stream between two processes: payload bytes per second
//                 (every TCP figure uses the congestion control of Chorus's links within a
//                 host: UseSameHostCongestionControl)
//   tcp bidir     two processes each sending and receiving at once on one connection (what
//                 every rank of a ring does): payload bytes per second in each direction
//   tcp rtt       8-byte ping-pong between two processes: median round trip, each side
//                 sleeping in recv() until its message comes
//   tcp rtt busy  the same with both sides polling the socket (non-blocking recv in a loop):
//                 the round trip without wake-ups, the floor of a small message over TCP
//   cache line    two processes passing a counter through one shared cache line, each
//                 spinning until it changes: median one-way handoff, the floor of a small
//                 message through shared memory
//
// Every figure uses GB = 1e9 bytes, as nccl-tests does. The probe forks a helper process for
// the TCP figures, so call it before the program starts threads of its own.
#ifndef CHORUS_BENCHMARKS_MACHINE_LIMITS_H_
#define CHORUS_BENCHMARKS_MACHINE_LIMITS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace chorus::bench {

// What the machine is; read from the kernel, no measurement.
struct MachineDescription {
  std::string hostname;
  std::string cpu_model;  // /proc/cpuinfo "model name"
  int online_cores = 0;
  int64_t memory_bytes = 0;
  std::string kernel;  // uname -sr
};

MachineDescription DescribeMachine();

// How long and how large each probe is. The defaults keep the whole probe under ~6 s on an
// idle machine; each measurement stops at its time budget even if its byte count is not done.
struct MachineLimitsOptions {
  // Per buffer: the size of the largest message the standard sweeps time, so the limit is
  // measured on the same working set. That is larger than most last-level caches, not every
  // one: where the cache holds it, the memcpy limit is a cache-warm copy and reads high.
  int64_t memory_buffer_bytes = int64_t{64} << 20;
  absl::Duration memory_budget = absl::Milliseconds(600);  // per memory probe
  int64_t tcp_bytes = int64_t{1} << 30;                    // per direction, per TCP probe
  absl::Duration tcp_budget = absl::Seconds(2);            // per TCP throughput probe
  int64_t tcp_socket_buffer_bytes = int64_t{4} << 20;      // SO_SNDBUF/SO_RCVBUF; 0: kernel's
  int rtt_round_trips = 5000;
  absl::Duration rtt_budget = absl::Milliseconds(800);
};

struct MachineLimits {
  double memcpy_gbps = 0;
  double reduce_float_sum_gbps = 0;
  double tcp_one_way_gbps = 0;
  double tcp_bidirectional_gbps_per_direction = 0;
  double tcp_rtt_median_us = 0;
  double tcp_rtt_busy_poll_median_us = 0;
  double cache_line_handoff_median_ns = 0;  // one way
  int64_t tcp_one_way_bytes = 0;  // bytes actually moved (less than asked if the budget ran out)
  int64_t tcp_bidirectional_bytes = 0;  // per direction
  int rtt_samples = 0;  // of the tcp rtt probe
  absl::Duration probe_time;  // wall time of the whole probe
};

// Runs every probe. Errors (a socket or fork failure, a helper process that does not finish in
// time) name the probe that failed.
absl::StatusOr<MachineLimits> ProbeMachineLimits(
    const MachineLimitsOptions& options = MachineLimitsOptions());

// "# machine: ..." and "# limits: ..." comment lines, as printed before a benchmark sweep.
std::string FormatMachine(const MachineDescription& machine, const MachineLimits& limits);

}  // namespace chorus::bench

#endif  // CHORUS_BENCHMARKS_MACHINE_LIMITS_H_
