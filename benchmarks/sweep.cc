#include "chorus/benchmarks/sweep.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "chorus/benchmarks/verify.h"
#include "chorus/collectives/shape.h"
#include "chorus/core/status.h"

namespace chorus::bench {
namespace {

using Clock = std::chrono::steady_clock;

enum class Mode { kOutOfPlace, kInPlace };

absl::string_view ModeName(Mode mode) {
  return mode == Mode::kOutOfPlace ? "out-of-place" : "in-place";
}

// Buffers for the largest size, reused by every row.
// Where the collective runs (`input`, `output`) and, for GPU buffers, the host copies that the
// verification fills and checks (`host_*`; the same buffers for host memory).
struct Buffers {
  std::shared_ptr<std::byte> input;
  std::shared_ptr<std::byte> output;
  std::shared_ptr<std::byte> host_input;
  std::shared_ptr<std::byte> host_output;
  size_t input_bytes = 0;
  size_t output_bytes = 0;
  GpuRuntime* gpu = nullptr;
  int device = -1;
};

// Copies `bytes` between host and GPU memory and waits for it.
absl::Status CopyAndWait(const Buffers& buffers, void* dst, const void* src, size_t bytes) {
  CHORUS_RETURN_IF_ERROR(buffers.gpu->CopyAsync(dst, src, bytes, buffers.device, nullptr));
  return buffers.gpu->WaitStream(buffers.device, nullptr, Deadline::After(absl::Minutes(1)));
}

// The input and output pointers of one mode, nccl-tests layout: in place, both lie in the
// output buffer as the collective's in-place form places them (allgather reads its input from
// its own chunk of the output, reduce-scatter writes its output into its own chunk of the
// input).
std::pair<void*, void*> Layout(std::byte* input, std::byte* output, Mode mode,
                               const BenchmarkOptions& o, int64_t count, int rank, int ranks) {
  if (mode == Mode::kOutOfPlace) return {input, output};
  CollectiveArgs args = ArgsForArray(o.collective, static_cast<size_t>(count), ranks);
  args.root = o.root;
  const InPlaceOffsets at = InPlaceOffsetsOf(args, rank).value_or(InPlaceOffsets{});
  std::byte* base = output;
  const size_t element_size = DataTypeSize(o.type);
  return {base + at.send * element_size, base + at.recv * element_size};
}

absl::StatusOr<Measurement> MeasureMode(CollectiveTarget& target, const RunReport& run,
                                        const Buffers& buffers, Mode mode, int64_t bytes,
                                        int64_t count) {
  const BenchmarkOptions& o = run.options;
  const VerifySpec spec{o.collective, o.type, o.op, target.ranks(), o.root, count};
  const auto [input, output] = Layout(buffers.input.get(), buffers.output.get(), mode, o, count,
                                      target.rank(), target.ranks());
  const auto [host_input, host_output] = Layout(buffers.host_input.get(), buffers.host_output.get(),
                                                mode, o, count, target.rank(), target.ranks());
  CHORUS_RETURN_IF_ERROR(target.Bind(input, output, count));

  // Verification: fresh inputs each time, untouched outputs marked, nothing timed.
  const bool checked = o.check_iterations > 0 && o.collective != CollectiveKind::kBarrier;
  int64_t wrong = 0;
  for (int i = 0; checked && i < o.check_iterations; ++i) {
    FillInput(spec, target.rank(), host_input);
    if (mode == Mode::kOutOfPlace) {
      FillSentinel(
          spec, host_output,
          static_cast<int64_t>(BufferElementsFor(o.collective, count, target.ranks()).recv));
    }
    if (buffers.gpu != nullptr) {
      CHORUS_RETURN_IF_ERROR(
          CopyAndWait(buffers, buffers.input.get(), buffers.host_input.get(), buffers.input_bytes));
      CHORUS_RETURN_IF_ERROR(CopyAndWait(buffers, buffers.output.get(), buffers.host_output.get(),
                                         buffers.output_bytes));
    }
    CHORUS_RETURN_IF_ERROR(target.Run());
    if (buffers.gpu != nullptr) {
      CHORUS_RETURN_IF_ERROR(CopyAndWait(buffers, buffers.host_output.get(), buffers.output.get(),
                                         buffers.output_bytes));
    }
    wrong += CountWrong(spec, target.rank(), host_output);
  }

  for (int i = 0; i < o.warmup_iterations; ++i) CHORUS_RETURN_IF_ERROR(target.Run());
  CHORUS_RETURN_IF_ERROR(target.Barrier());
  const auto start = Clock::now();
  for (int i = 0; i < o.iterations; ++i) CHORUS_RETURN_IF_ERROR(target.Run());
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count() / o.iterations;

  CHORUS_ASSIGN_OR_RETURN(const double slowest, target.MaxOverRanks(seconds));
  int64_t total_wrong = -1;
  if (checked) {
    CHORUS_ASSIGN_OR_RETURN(total_wrong, target.SumOverRanks(wrong));
  }
  return MakeMeasurement(o.collective, target.ranks(), bytes, slowest, total_wrong);
}

// Runs the first size's collective in place until at least o.settle_ms have passed on the
// slowest rank: in batches, after each of which the ranks agree on the time, so that every rank
// makes the same calls.
absl::Status Settle(CollectiveTarget& target, const BenchmarkOptions& o, const Buffers& buffers,
                    int64_t count) {
  constexpr int kBatch = 64;
  const auto [input, output] = Layout(buffers.input.get(), buffers.output.get(), Mode::kInPlace, o,
                                      count, target.rank(), target.ranks());
  CHORUS_RETURN_IF_ERROR(target.Bind(input, output, count));
  const auto start = Clock::now();
  for (double slowest_ms = 0; slowest_ms < o.settle_ms;) {
    for (int i = 0; i < kBatch; ++i) CHORUS_RETURN_IF_ERROR(target.Run());
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    CHORUS_ASSIGN_OR_RETURN(slowest_ms, target.MaxOverRanks(ms));
  }
  return absl::OkStatus();
}

}  // namespace

// Page-aligned and touched once, so the first timed iteration does not take page faults.
absl::StatusOr<std::shared_ptr<std::byte>> CollectiveTarget::AllocateBuffer(size_t bytes) {
  constexpr size_t kAlignment = 4096;
  const size_t size = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  std::shared_ptr<std::byte> buffer(static_cast<std::byte*>(std::aligned_alloc(kAlignment, size)),
                                    [](std::byte* p) { std::free(p); });
  if (buffer == nullptr) {
    return InvalidArgumentError(
        absl::StrCat("cannot allocate a buffer of ", bytes, " bytes; lower -e"));
  }
  std::memset(buffer.get(), 0, size);
  return buffer;
}

absl::Status RunSweep(CollectiveTarget& target, RunReport& run, std::FILE* out) {
  const BenchmarkOptions& o = run.options;
  CHORUS_RETURN_IF_ERROR(ValidateForRanks(o, target.ranks()));
  const bool print = target.rank() == 0;
  if (print) std::fputs(FormatTableHeader(run).c_str(), out);

  const std::vector<int64_t> sizes = SweepSizes(o, target.ranks());
  const size_t element_size = DataTypeSize(o.type);
  const int64_t max_count = sizes.back() / static_cast<int64_t>(element_size);
  const BufferElements largest = BufferElementsFor(o.collective, max_count, target.ranks());
  const size_t output_elements = std::max(largest.send, largest.recv);
  Buffers buffers;
  buffers.input_bytes = largest.send * element_size;
  buffers.output_bytes = output_elements * element_size;
  CHORUS_ASSIGN_OR_RETURN(buffers.input, target.AllocateBuffer(buffers.input_bytes));
  CHORUS_ASSIGN_OR_RETURN(buffers.output, target.AllocateBuffer(buffers.output_bytes));
  buffers.gpu = target.DeviceMemory(&buffers.device);
  buffers.host_input = buffers.input;
  buffers.host_output = buffers.output;
  if (buffers.gpu != nullptr) {
    CHORUS_ASSIGN_OR_RETURN(buffers.host_input,
                            target.CollectiveTarget::AllocateBuffer(buffers.input_bytes));
    CHORUS_ASSIGN_OR_RETURN(buffers.host_output,
                            target.CollectiveTarget::AllocateBuffer(buffers.output_bytes));
  }

  if (o.settle_ms > 0) {
    const absl::Status settled =
        Settle(target, o, buffers, sizes.front() / static_cast<int64_t>(element_size));
    if (!settled.ok()) return Annotate(settled, "settling (--settle_ms)");
  }
  for (const int64_t bytes : sizes) {
    ResultRow row;
    row.bytes = bytes;
    row.count = bytes / static_cast<int64_t>(element_size);
    for (const Mode mode : {Mode::kOutOfPlace, Mode::kInPlace}) {
      // Barrier has no buffers: it is timed once, in the in-place columns.
      if (mode == Mode::kOutOfPlace &&
          (!target.SupportsOutOfPlace() || o.collective == CollectiveKind::kBarrier)) {
        continue;
      }
      auto measured = MeasureMode(target, run, buffers, mode, bytes, row.count);
      if (!measured.ok()) {
        return Annotate(measured.status(), absl::StrCat(CollectiveKindName(o.collective), " of ",
                                                        bytes, " bytes, ", ModeName(mode)));
      }
      (mode == Mode::kOutOfPlace ? row.out_of_place : row.in_place) = *measured;
    }
    if (print) {
      std::fputs(FormatRow(run, row).c_str(), out);
      std::fflush(out);
    }
    run.rows.push_back(row);
  }
  if (print) std::fputs(FormatFooter(run).c_str(), out);
  return absl::OkStatus();
}

}  // namespace chorus::bench
