// staging_model: how fast a two-copy shared-memory allreduce can be on this machine, with no
// transport in the way, beside the limits it is judged against (the memcpy limit that
// chorus_bench prints and benchmarks/shm_targets.py judges a 64 MiB allreduce by).
//
//   bazel run //benchmarks/experiments:staging_model -- [rounds]
//
// Two forked processes, each with private (heap) buffers like chorus_bench's default, measure
// in one run:
//   - memcpy of 64 MiB on one core while the other process waits (the tool's memcpy limit);
//   - both processes at once copying 32 MiB out of the other's memory: from a shared mapping
//     with memcpy, and from its heap with process_vm_readv (cross-memory attach) in 2 MiB calls;
//     and the latter with one process reading while the other waits;
//   - a 2-rank 64 MiB float32 sum allreduce in place, in lockstep per segment behind a spin
//     barrier, as the four passes a staging area needs: each rank copies its partial of the
//     peer's half into the staging area, reduces the peer's partial of its own half out of it
//     (Chorus's ReduceBuffers), copies the result in, and copies the peer's result out. Run
//     at 256 KiB to 2 MiB segments, plain and "fused" (the result copied in 64 KiB at a time
//     as it is reduced, while cached); busbw = algbw for 2 ranks.
// Every figure is the median of `rounds` (default 9) but memcpy's, the best as in chorus_bench's
// probe; variants alternate so they share the machine's moods. The model has no messages, no
// progress engine and no waiting beyond the barrier, so it is a ceiling for the design, not a
// prediction.
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "chorus/collectives/reduce/reduce_kernels.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kBytes = size_t{64} << 20;
constexpr size_t kHalf = kBytes / 2;
constexpr size_t kSlots = 4;  // staging slots per (phase, direction), cycled
constexpr size_t kSegments[] = {size_t{256} << 10, size_t{512} << 10, size_t{1} << 20,
                                size_t{2} << 20};
constexpr size_t kMaxSegment = size_t{2} << 20;
constexpr size_t kFusedPiece = size_t{64} << 10;
constexpr auto kBarrierPatience = std::chrono::seconds(20);

// Shared between the two processes: one barrier counter per rank on its own cache line, and
// the heap address of each rank's buffer (for process_vm_readv).
struct alignas(64) Line {
  std::atomic<int64_t> value;
};
struct SharedState {
  Line arrived[2];
  Line buffer_address[2];
  Line pid[2];
};

class Rank {
 public:
  Rank(int rank, SharedState* shared, char* shared_halves, char* staging)
      : rank_(rank), shared_(shared), shared_halves_(shared_halves), staging_(staging) {}

  // Both ranks pass together; a peer gone for kBarrierPatience ends this process.
  void Barrier() {
    ++generation_;
    shared_->arrived[rank_].value.store(generation_, std::memory_order_release);
    const auto give_up = Clock::now() + kBarrierPatience;
    while (shared_->arrived[1 - rank_].value.load(std::memory_order_acquire) < generation_) {
      if (Clock::now() > give_up) {
        std::fprintf(stderr, "staging_model: rank %d: the other rank stopped\n", rank_);
        _exit(2);
      }
    }
  }

  // Passes back to back, the fastest: as chorus_bench's probe, whose buffers stay warm in a
  // last-level cache that holds them.
  double Memcpy(std::vector<char>& target, const std::vector<char>& source) {
    constexpr int kPasses = 10;
    Barrier();
    double best = 0;
    for (int pass = 0; rank_ == 0 && pass < kPasses; ++pass) {
      const auto start = Clock::now();
      std::memcpy(target.data(), source.data(), kBytes);
      const double seconds = Elapsed(start);
      if (best == 0 || seconds < best) best = seconds;
    }
    Barrier();
    return best;
  }

  double BothCopyShared(char* target) {
    Barrier();
    const auto start = Clock::now();
    std::memcpy(target, shared_halves_ + (1 - rank_) * kHalf, kHalf);
    const double seconds = Elapsed(start);
    Barrier();
    return seconds;
  }

  // Copies 32 MiB of the peer's heap into `target` by process_vm_readv in 2 MiB calls: both
  // ranks at once (as an allreduce would), or rank 0 alone while the peer waits.
  double ReadAcross(char* target, pid_t peer, const char* peer_buffer, bool both) {
    Barrier();
    double seconds = 0;
    if (both || rank_ == 0) {
      const auto start = Clock::now();
      for (size_t offset = 0; offset < kHalf; offset += kMaxSegment) {
        iovec local{target + offset, kMaxSegment};
        iovec remote{const_cast<char*>(peer_buffer) + offset, kMaxSegment};
        if (process_vm_readv(peer, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(kMaxSegment)) {
          std::perror("staging_model: process_vm_readv");
          _exit(3);
        }
      }
      seconds = Elapsed(start);
    }
    Barrier();
    return seconds;
  }

  // The in-place allreduce of `data` (kBytes of float32) through the staging area. `fused`:
  // the result is copied into the staging area 64 KiB at a time right after it is reduced,
  // while it is still in the core's cache (what a reduce-and-forward kernel would save).
  double Allreduce(char* data, size_t segment, bool fused) {
    const size_t mine = rank_ * kHalf;
    const size_t theirs = (1 - rank_) * kHalf;
    Barrier();
    const auto start = Clock::now();
    for (size_t s = 0; s < kHalf / segment; ++s) {
      const size_t at = s * segment;
      std::memcpy(Slot(segment, 0, rank_, s), data + theirs + at, segment);
      Barrier();
      const size_t piece = fused ? kFusedPiece : segment;
      for (size_t done = 0; done < segment; done += piece) {
        ReduceBuffers(DataType::kFloat32, ReduceOp::kSum, Slot(segment, 0, 1 - rank_, s) + done,
                      data + mine + at + done, data + mine + at + done, piece / sizeof(float));
        std::memcpy(Slot(segment, 1, rank_, s) + done, data + mine + at + done, piece);
      }
      Barrier();
      std::memcpy(data + theirs + at, Slot(segment, 1, 1 - rank_, s), segment);
    }
    Barrier();
    return Elapsed(start);
  }

 private:
  static double Elapsed(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  // Phase 0 carries partials, phase 1 results; `from` is the writing rank.
  char* Slot(size_t segment, int phase, int from, size_t index) const {
    return staging_ + ((phase * 2 + from) * kSlots + index % kSlots) * segment;
  }

  const int rank_;
  SharedState* const shared_;
  char* const shared_halves_;
  char* const staging_;
  int64_t generation_ = 0;
};

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double GBps(size_t bytes, double seconds) { return static_cast<double>(bytes) / seconds / 1e9; }

void RunRank(int rank, int rounds, SharedState* shared, char* shared_halves, char* staging) {
  Rank self(rank, shared, shared_halves, staging);
  std::vector<char> source(kBytes, 1);
  std::vector<char> target(kBytes, 0);
  std::vector<float> data(kBytes / sizeof(float), 1.0f);
  shared->buffer_address[rank].value.store(reinterpret_cast<int64_t>(source.data()));
  shared->pid[rank].value.store(getpid());
  self.Barrier();
  const pid_t peer = static_cast<pid_t>(shared->pid[1 - rank].value.load());
  const auto* peer_buffer =
      reinterpret_cast<const char*>(shared->buffer_address[1 - rank].value.load());

  std::vector<double> memcpy_s, shared_s, across_s, alone_s;
  // Per (segment, fused) pair, in the order they run.
  std::vector<std::vector<double>> allreduce_s(2 * std::size(kSegments));
  for (int round = 0; round < rounds + 1; ++round) {  // round 0 warms up
    const double m = self.Memcpy(target, source);
    const double c = self.BothCopyShared(target.data());
    const double x = self.ReadAcross(target.data(), peer, peer_buffer, /*both=*/true);
    const double alone = self.ReadAcross(target.data(), peer, peer_buffer, /*both=*/false);
    std::vector<double> a;
    for (size_t segment : kSegments) {
      for (bool fused : {false, true}) {
        a.push_back(self.Allreduce(reinterpret_cast<char*>(data.data()), segment, fused));
      }
    }
    if (round == 0) continue;
    memcpy_s.push_back(m);
    shared_s.push_back(c);
    across_s.push_back(x);
    alone_s.push_back(alone);
    for (size_t i = 0; i < a.size(); ++i) allreduce_s[i].push_back(a[i]);
  }
  // Each allreduce doubles every element (two ranks' equal values summed), exactly while the
  // power of two fits a float: a wrong model would show here, not only in its speed.
  const int allreduces = (rounds + 1) * static_cast<int>(allreduce_s.size());
  if (allreduces < 127) {
    const float expected = std::ldexp(1.0f, allreduces);
    for (size_t i = 0; i < data.size(); i += 4099) {
      if (data[i] != expected) {
        std::fprintf(stderr, "staging_model: rank %d: element %zu is %g, not %g\n", rank, i,
                     data[i], expected);
        _exit(4);
      }
    }
  }
  if (rank != 0) return;
  // The limit is the fastest memcpy, as chorus_bench's probe takes it.
  const double memcpy_best = *std::min_element(memcpy_s.begin(), memcpy_s.end());
  std::printf("# staging_model: medians of %d rounds (memcpy: the best), GB = 1e9 bytes\n", rounds);
  std::printf("memcpy 64 MiB, one core                      %6.2f GB/s\n",
              GBps(kBytes, memcpy_best));
  std::printf("both at once, 32 MiB each: shared memcpy     %6.2f GB/s per process\n",
              GBps(kHalf, Median(shared_s)));
  std::printf("both at once, 32 MiB each: process_vm_readv  %6.2f GB/s per process\n",
              GBps(kHalf, Median(across_s)));
  std::printf("one alone, 32 MiB: process_vm_readv           %6.2f GB/s\n",
              GBps(kHalf, Median(alone_s)));
  for (size_t i = 0; i < allreduce_s.size(); ++i) {
    std::printf(
        "staging allreduce, %4zu KiB segments, %-5s  %6.2f GB/s busbw (%.0f %% of memcpy)\n",
        kSegments[i / 2] >> 10, i % 2 == 0 ? "plain" : "fused",
        GBps(kBytes, Median(allreduce_s[i])), 100 * memcpy_best / Median(allreduce_s[i]));
  }
}

int Main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 9;
  const size_t staging_bytes = 2 * 2 * kSlots * kMaxSegment;
  void* mapped = mmap(nullptr, sizeof(SharedState) + kBytes + staging_bytes, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) {
    std::perror("staging_model: mmap");
    return 1;
  }
  auto* shared = new (mapped) SharedState{};
  char* shared_halves = static_cast<char*>(mapped) + sizeof(SharedState);
  char* staging = shared_halves + kBytes;
  std::memset(shared_halves, 1, kBytes + staging_bytes);

  const pid_t child = fork();
  if (child < 0) {
    std::perror("staging_model: fork");
    return 1;
  }
  // Under Yama's ptrace_scope 1 only an ancestor may read a process: let the child read us.
  if (child > 0) prctl(PR_SET_PTRACER, child);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    RunRank(1, rounds, shared, shared_halves, staging);
    _exit(0);
  }
  RunRank(0, rounds, shared, shared_halves, staging);
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) { return chorus::Main(argc, argv); }
