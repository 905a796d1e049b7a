#include "chorus/benchmarks/machine_limits.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <new>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "chorus/core/socket.h"
#include "chorus/core/status.h"

namespace chorus::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double GigabytesPerSecond(int64_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0;
}

absl::Status ErrnoError(absl::string_view probe, absl::string_view what) {
  return InternalError(absl::StrCat("machine-limits probe '", probe, "': ", what,
                                    " failed: ", std::strerror(errno)));
}

// Runs `pass` repeatedly until `budget` is spent (at least twice, so the first pass can warm the
// caches and TLB) and returns the bandwidth of the fastest pass: the ceiling, not the average.
double BestBandwidth(int64_t bytes_per_pass, absl::Duration budget,
                     const std::function<void()>& pass) {
  const auto stop = Clock::now() + absl::ToChronoNanoseconds(budget);
  double best_seconds = 0;
  for (int passes = 0; passes < 2 || Clock::now() < stop; ++passes) {
    const auto start = Clock::now();
    pass();
    const double seconds = Seconds(Clock::now() - start);
    if (best_seconds == 0 || seconds < best_seconds) best_seconds = seconds;
  }
  return GigabytesPerSecond(bytes_per_pass, best_seconds);
}

double MeasureMemcpy(const MachineLimitsOptions& options) {
  const size_t bytes = static_cast<size_t>(options.memory_buffer_bytes);
  std::vector<char> source(bytes, 1);
  std::vector<char> target(bytes, 0);
  return BestBandwidth(options.memory_buffer_bytes, options.memory_budget,
                       [&] { std::memcpy(target.data(), source.data(), bytes); });
}

// Kept out of line so the compiler vectorises it as it would a library's generic kernel.
__attribute__((noinline)) void AddFloats(const float* __restrict a, const float* __restrict b,
                                         float* __restrict c, size_t count) {
  for (size_t i = 0; i < count; ++i) c[i] = a[i] + b[i];
}

double MeasureReduce(const MachineLimitsOptions& options) {
  const size_t count = static_cast<size_t>(options.memory_buffer_bytes) / sizeof(float);
  std::vector<float> a(count, 1.0f);
  std::vector<float> b(count, 2.0f);
  std::vector<float> c(count, 0.0f);
  return BestBandwidth(static_cast<int64_t>(count * sizeof(float)), options.memory_budget,
                       [&] { AddFloats(a.data(), b.data(), c.data(), count); });
}

// --- loopback TCP between this process and a forked helper ---------------------------------

void ConfigureSocket(int fd, const MachineLimitsOptions& options, absl::Duration io_timeout) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (options.tcp_socket_buffer_bytes > 0) {
    const int size = static_cast<int>(options.tcp_socket_buffer_bytes);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  }
  // The congestion control Chorus gives its links within a host whose ranks have a core each
  // (the probe's two processes), so the limit is what such a link can reach.
  UseSameHostCongestionControl(fd, SameHostLink::kCoreEach);
  // A blocking call that outlives the probe's budget fails instead of hanging.
  timeval tv{};
  tv.tv_sec = absl::ToInt64Seconds(io_timeout);
  tv.tv_usec = absl::ToInt64Microseconds(io_timeout) % 1000000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

bool SendAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool RecvAll(int fd, char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = recv(fd, data, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Polls between yields of the core in the spinning probes: far more than an idle machine needs
// for a handoff, so the yield only matters when the peer is waiting for a core.
constexpr uint64_t kPollsPerYield = 1024;

// RecvAll by polling: non-blocking recv() in a loop, never sleeping; false on an error, the
// peer's close or `deadline`.
bool RecvAllPolling(int fd, char* data, size_t size, Clock::time_point deadline) {
  for (uint64_t polls = 0; size > 0; ++polls) {
    const ssize_t n = recv(fd, data, size, MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
    } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return false;
    } else if (polls % kPollsPerYield == kPollsPerYield - 1) {
      if (Clock::now() > deadline) return false;
      sched_yield();  // where processes outnumber cores, the peer needs this core to answer
    }
  }
  return true;
}

// The median of `samples` (not empty); reorders them.
double Median(std::vector<double>& samples) {
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

constexpr size_t kStreamChunk = size_t{1} << 20;

// How far past its budget a probe may go to finish what it started: the helper process's
// start and exit, and the one round trip a probe measures however small its budget.
constexpr absl::Duration kGrace = absl::Seconds(5);

// Sends up to `bytes` in large chunks, stopping early at `budget`; returns the bytes sent, or
// -1 on a socket error. Half-closes the connection afterwards so the peer sees the end.
int64_t StreamOut(int fd, int64_t bytes, absl::Duration budget) {
  std::vector<char> chunk(kStreamChunk, 'c');
  const auto stop = Clock::now() + absl::ToChronoNanoseconds(budget);
  int64_t sent = 0;
  while (sent < bytes && Clock::now() < stop) {
    const size_t size = static_cast<size_t>(std::min<int64_t>(bytes - sent, kStreamChunk));
    if (!SendAll(fd, chunk.data(), size)) return -1;
    sent += static_cast<int64_t>(size);
  }
  shutdown(fd, SHUT_WR);
  return sent;
}

// Receives until the peer half-closes; returns the bytes received, or -1 on a socket error.
int64_t StreamIn(int fd) {
  std::vector<char> chunk(kStreamChunk);
  int64_t received = 0;
  for (;;) {
    const ssize_t n = recv(fd, chunk.data(), chunk.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) return received;
    received += n;
  }
}

// Sends and receives at once, as a ring rank does. Returns {sent, received} or -1 in either.
std::pair<int64_t, int64_t> StreamBothWays(int fd, int64_t bytes, absl::Duration budget) {
  int64_t sent = 0;
  std::thread sender([&] { sent = StreamOut(fd, bytes, budget); });
  const int64_t received = StreamIn(fd);
  sender.join();
  return {sent, received};
}

// Runs `helper` in a forked process connected to this one over 127.0.0.1 and `local` here on
// the other end of the connection. The helper's return value is its exit code (0: success).
// The helper is always reaped: it is killed if it has not finished `grace` after `local`.
absl::Status WithLoopbackHelper(absl::string_view probe, const MachineLimitsOptions& options,
                                absl::Duration budget, const std::function<int(int fd)>& helper,
                                const std::function<absl::Status(int fd)>& local) {
  const absl::Duration grace = kGrace;
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) return ErrnoError(probe, "socket()");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    absl::Status status = ErrnoError(probe, "bind/listen on 127.0.0.1");
    close(listener);
    return status;
  }

  const pid_t pid = fork();
  if (pid < 0) {
    absl::Status status = ErrnoError(probe, "fork()");
    close(listener);
    return status;
  }
  if (pid == 0) {
    close(listener);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) _exit(2);
    ConfigureSocket(fd, options, budget + grace);
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) _exit(3);
    const int code = helper(fd);
    close(fd);
    _exit(code);
  }

  absl::Status status;
  pollfd ready{listener, POLLIN, 0};
  const int polled = poll(&ready, 1, static_cast<int>(absl::ToInt64Milliseconds(grace)));
  const int fd = polled == 1 ? accept4(listener, nullptr, nullptr, SOCK_CLOEXEC) : -1;
  close(listener);
  if (fd < 0) {
    status = InternalError(absl::StrCat("machine-limits probe '", probe,
                                        "': the helper process did not connect within ",
                                        absl::FormatDuration(grace)));
  } else {
    ConfigureSocket(fd, options, budget + grace);
    status = local(fd);
    close(fd);
  }

  // Reap the helper, killing it if it does not finish on its own.
  const auto give_up = Clock::now() + absl::ToChronoNanoseconds(grace);
  int wait_status = 0;
  pid_t reaped = 0;
  while ((reaped = waitpid(pid, &wait_status, WNOHANG)) == 0 && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (reaped == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &wait_status, 0);
    if (status.ok()) {
      status = InternalError(absl::StrCat("machine-limits probe '", probe,
                                          "': the helper process did not finish; killed it"));
    }
  } else if (status.ok() && !(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0)) {
    status =
        InternalError(absl::StrCat("machine-limits probe '", probe,
                                   "': the helper process failed (wait status ", wait_status, ")"));
  }
  return status;
}

absl::Status MeasureTcpOneWay(const MachineLimitsOptions& options, MachineLimits& limits) {
  return WithLoopbackHelper(
      "tcp one-way", options, options.tcp_budget,
      [&](int fd) { return StreamOut(fd, options.tcp_bytes, options.tcp_budget) < 0 ? 1 : 0; },
      [&](int fd) {
        // The clock starts at the first byte, so the helper's start-up is not counted.
        char first = 0;
        if (!RecvAll(fd, &first, 1)) return ErrnoError("tcp one-way", "first recv()");
        const auto start = Clock::now();
        const int64_t received = StreamIn(fd);
        if (received < 0) return ErrnoError("tcp one-way", "recv()");
        limits.tcp_one_way_bytes = received + 1;
        limits.tcp_one_way_gbps = GigabytesPerSecond(received, Seconds(Clock::now() - start));
        return absl::OkStatus();
      });
}

absl::Status MeasureTcpBidirectional(const MachineLimitsOptions& options, MachineLimits& limits) {
  return WithLoopbackHelper(
      "tcp bidirectional", options, options.tcp_budget,
      [&](int fd) {
        const auto [sent, received] = StreamBothWays(fd, options.tcp_bytes, options.tcp_budget);
        return sent < 0 || received < 0 ? 1 : 0;
      },
      [&](int fd) {
        const auto start = Clock::now();
        const auto [sent, received] = StreamBothWays(fd, options.tcp_bytes, options.tcp_budget);
        const double seconds = Seconds(Clock::now() - start);
        if (sent < 0 || received < 0) return ErrnoError("tcp bidirectional", "send/recv");
        limits.tcp_bidirectional_bytes = std::min(sent, received);
        limits.tcp_bidirectional_gbps_per_direction =
            GigabytesPerSecond((sent + received) / 2, seconds);
        return absl::OkStatus();
      });
}

// `busy_poll`: both sides poll the socket instead of sleeping in recv().
absl::Status MeasureTcpRoundTrip(const MachineLimitsOptions& options, bool busy_poll,
                                 MachineLimits& limits) {
  constexpr size_t kMessage = 8;
  constexpr int kWarmUp = 50;
  const char* probe = busy_poll ? "tcp rtt busy" : "tcp rtt";
  const auto receive = [busy_poll, &options](int fd, char* message) {
    const auto deadline = Clock::now() + absl::ToChronoNanoseconds(options.rtt_budget + kGrace);
    return busy_poll ? RecvAllPolling(fd, message, kMessage, deadline)
                     : RecvAll(fd, message, kMessage);
  };
  return WithLoopbackHelper(
      probe, options, options.rtt_budget,
      [&](int fd) {
        char message[kMessage];
        while (receive(fd, message)) {
          if (!SendAll(fd, message, kMessage)) return 1;
        }
        return 0;  // the prober closed the connection: done
      },
      [&](int fd) {
        char message[kMessage] = {};
        std::vector<double> samples;
        samples.reserve(static_cast<size_t>(options.rtt_round_trips));
        const auto stop = Clock::now() + absl::ToChronoNanoseconds(options.rtt_budget);
        // The budget ends the sampling once there is a sample: a loaded machine still gets one.
        for (int i = 0; i < kWarmUp + options.rtt_round_trips; ++i) {
          if (Clock::now() >= stop && !samples.empty()) break;
          const auto start = Clock::now();
          if (!SendAll(fd, message, kMessage) || !receive(fd, message)) {
            return ErrnoError(probe, "ping-pong");
          }
          if (i >= kWarmUp) samples.push_back(Seconds(Clock::now() - start) * 1e6);
        }
        if (samples.empty()) {
          return InternalError(
              absl::StrCat("machine-limits probe '", probe, "': no round trip within budget"));
        }
        if (busy_poll) {
          limits.tcp_rtt_busy_poll_median_us = Median(samples);
        } else {
          limits.tcp_rtt_median_us = Median(samples);
          limits.rtt_samples = static_cast<int>(samples.size());
        }
        return absl::OkStatus();
      });
}

// Parent and a forked child pass a counter back and forth through one shared cache line: the
// parent writes an odd value, the child answers with the next even one. Each spins on the line
// (bounded by the budget); half the median round trip is the one-way handoff.
absl::Status MeasureCacheLineHandoff(const MachineLimitsOptions& options, MachineLimits& limits) {
  constexpr int kWarmUp = 100;
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return ErrnoError("cache line", "mmap()");
  auto* line = new (page) std::atomic<uint64_t>(0);
  constexpr uint64_t kStop = ~uint64_t{0};  // the parent is done: the child stops waiting
  const auto stop = Clock::now() + absl::ToChronoNanoseconds(options.rtt_budget);
  const auto give_up = stop + absl::ToChronoNanoseconds(kGrace);
  // Spins until `line` holds `value`; false on kStop or past give_up.
  const auto await = [&](uint64_t value) {
    for (uint64_t spins = 0;; ++spins) {
      const uint64_t seen = line->load(std::memory_order_acquire);
      if (seen == value) return true;
      if (seen == kStop) return false;
      if (spins % kPollsPerYield == kPollsPerYield - 1) {
        if (Clock::now() > give_up) return false;
        sched_yield();  // as in RecvAllPolling
      }
    }
  };
  const uint64_t round_trips = static_cast<uint64_t>(kWarmUp + options.rtt_round_trips);
  const pid_t pid = fork();
  if (pid < 0) {
    munmap(page, 4096);
    return ErrnoError("cache line", "fork()");
  }
  if (pid == 0) {
    for (uint64_t i = 0; i < round_trips; ++i) {
      if (!await(2 * i + 1)) _exit(0);  // the parent stopped at its budget
      line->store(2 * i + 2, std::memory_order_release);
    }
    _exit(0);
  }
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(options.rtt_round_trips));
  // The budget ends the sampling once there is a sample: a loaded machine still gets one.
  for (uint64_t i = 0; i < round_trips; ++i) {
    if (Clock::now() >= stop && !samples.empty()) break;
    const auto start = Clock::now();
    line->store(2 * i + 1, std::memory_order_release);
    if (!await(2 * i + 2)) break;
    if (i >= kWarmUp) samples.push_back(Seconds(Clock::now() - start) * 1e9 / 2);
  }
  line->store(kStop, std::memory_order_release);
  int wait_status = 0;
  waitpid(pid, &wait_status, 0);  // it sees kStop, or gives up itself
  munmap(page, 4096);
  if (samples.empty()) {
    return InternalError("machine-limits probe 'cache line': no handoff within budget");
  }
  limits.cache_line_handoff_median_ns = Median(samples);
  return absl::OkStatus();
}

std::string FirstCpuModel() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    const size_t colon = line.find(':');
    if (absl::StartsWith(line, "model name") && colon != std::string::npos) {
      return std::string(absl::StripAsciiWhitespace(absl::string_view(line).substr(colon + 1)));
    }
  }
  return "unknown";
}

}  // namespace

MachineDescription DescribeMachine() {
  MachineDescription machine;
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  machine.hostname = hostname;
  machine.cpu_model = FirstCpuModel();
  machine.online_cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  machine.memory_bytes =
      static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  utsname name{};
  if (uname(&name) == 0) machine.kernel = absl::StrCat(name.sysname, " ", name.release);
  return machine;
}

absl::StatusOr<MachineLimits> ProbeMachineLimits(const MachineLimitsOptions& options) {
  if (options.memory_buffer_bytes < 4096 || options.tcp_bytes < 1 || options.rtt_round_trips < 1) {
    return InvalidArgumentError(
        "machine-limits probe: buffer sizes and round-trip count must be positive");
  }
  const auto start = Clock::now();
  MachineLimits limits;
  limits.memcpy_gbps = MeasureMemcpy(options);
  limits.reduce_float_sum_gbps = MeasureReduce(options);
  CHORUS_RETURN_IF_ERROR(MeasureTcpOneWay(options, limits));
  CHORUS_RETURN_IF_ERROR(MeasureTcpBidirectional(options, limits));
  CHORUS_RETURN_IF_ERROR(MeasureTcpRoundTrip(options, /*busy_poll=*/false, limits));
  CHORUS_RETURN_IF_ERROR(MeasureTcpRoundTrip(options, /*busy_poll=*/true, limits));
  CHORUS_RETURN_IF_ERROR(MeasureCacheLineHandoff(options, limits));
  limits.probe_time = absl::FromChrono(Clock::now() - start);
  return limits;
}

std::string FormatMachine(const MachineDescription& machine, const MachineLimits& limits) {
  return absl::StrFormat(
      "# machine: %s, %s, %d cores online, %.1f GiB, %s\n"
      "# limits (1 GB = 1e9 B, measured in %.1f s):\n"
      "#   memcpy 1 core               %8.2f GB/s  (bytes copied per second)\n"
      "#   float32 sum c=a+b 1 core    %8.2f GB/s  (output bytes per second)\n"
      "#   tcp loopback one-way        %8.2f GB/s  (one stream)\n"
      "#   tcp loopback bidirectional  %8.2f GB/s  (per direction, both at once)\n"
      "#   tcp loopback 8 B round trip %8.1f us    (median of %d)\n"
      "#   tcp 8 B round trip, polling %8.1f us    (both sides poll the socket)\n"
      "#   cache-line handoff          %8.0f ns    (one way, between two processes)\n",
      machine.hostname, machine.cpu_model, machine.online_cores,
      static_cast<double>(machine.memory_bytes) / (1 << 30), machine.kernel,
      absl::ToDoubleSeconds(limits.probe_time), limits.memcpy_gbps, limits.reduce_float_sum_gbps,
      limits.tcp_one_way_gbps, limits.tcp_bidirectional_gbps_per_direction,
      limits.tcp_rtt_median_us, limits.rtt_samples, limits.tcp_rtt_busy_poll_median_us,
      limits.cache_line_handoff_median_ns);
}

}  // namespace chorus::bench
