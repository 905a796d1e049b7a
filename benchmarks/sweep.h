// The size sweep both benchmark tools run: for each size and each mode (out-of-place,
// in-place) it binds the collective to buffers, verifies it exactly over -c iterations (apart
// from the timing), runs -w warm-up and -n timed iterations, takes the slowest rank's mean time
// and prints the row on rank 0.
#ifndef CHORUS_BENCHMARKS_SWEEP_H_
#define CHORUS_BENCHMARKS_SWEEP_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "chorus/benchmarks/report.h"
#include "chorus/cuda/gpu_runtime.h"

namespace chorus::bench {

// One library's implementation of one collective (and algorithm) on one rank, as the sweep
// drives it. Not thread-safe: one per rank, used from one thread.
class CollectiveTarget {
 public:
  virtual ~CollectiveTarget() = default;

  virtual int rank() const = 0;
  virtual int ranks() const = 0;

  // Whether the library can write the result to a buffer other than its input. When false the
  // sweep measures in-place only and reports out-of-place as N/A.
  virtual bool SupportsOutOfPlace() const = 0;

  // Binds the collective to `input` and `output` (sized by BufferElementsFor; the same buffer,
  // or nccl-tests' in-place layout for allgather and reduce-scatter) for a full array of `count`
  // elements. Called once per size and mode, outside the timed loop, so a library that builds
  // per-buffer state (Gloo's algorithm objects) pays for it here.
  virtual absl::Status Bind(void* input, void* output, int64_t count) = 0;

  // Runs the bound collective once.
  virtual absl::Status Run() = 0;

  // Page-aligned, zero-filled memory for the sweep's buffers (once, for the largest size); the
  // heap unless the library has memory of its own to offer (chorus_bench --buffers shared or
  // cuda).
  virtual absl::StatusOr<std::shared_ptr<std::byte>> AllocateBuffer(size_t bytes);

  // When AllocateBuffer gives GPU memory: the runtime and device whose copies the sweep uses to
  // fill and check the buffers through host copies, outside the timed loop. Null: host memory.
  virtual GpuRuntime* DeviceMemory(int* device) { return nullptr; }

  // Cross-rank aggregates, used outside the timed loop only.
  virtual absl::StatusOr<double> MaxOverRanks(double value) = 0;
  virtual absl::StatusOr<int64_t> SumOverRanks(int64_t value) = 0;
  virtual absl::Status Barrier() = 0;
};

// Runs the sweep of `run.options` on `target` and appends the rows to `run.rows`. Rank 0
// prints the table header, each row as it completes and the footer to `out`. Stops at the first
// error, which names the size and mode.
absl::Status RunSweep(CollectiveTarget& target, RunReport& run, std::FILE* out);

}  // namespace chorus::bench

#endif  // CHORUS_BENCHMARKS_SWEEP_H_
