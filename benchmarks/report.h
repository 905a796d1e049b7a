// What chorus-bench and gloo-bench share: nccl-tests flags, the size sweep, the result rows,
// the printed table and the JSON file, so the two tools' outputs compare line by line.
//
// Flags (nccl-tests names; sizes accept 4096, 64k, 4M, 1G):
//   -b, --minbytes      smallest size in bytes                        (default 8)
//   -e, --maxbytes      largest size in bytes                         (default 64M)
//   -f, --stepfactor    multiply the size by this between rows        (default 2)
//   -n, --iters         timed iterations per size                     (default 20)
//   -w, --warmup_iters  untimed iterations before them                (default 5)
//   -c, --check         checked iterations per size, apart from the timed ones; 0: none (1)
//   -d, --datatype      element type(s), comma-separated, or all: float32, int32, float16,
//                       ...; one sweep each                            (default float32)
//   -o, --op            reduction(s), comma-separated, or all: sum, prod, min, max, avg;
//                       one sweep each (reductions only)              (default sum)
//   -r, --root          root rank of broadcast and reduce             (default 0)
//   --coll              collective: allreduce, broadcast, reduce, allgather, reduce_scatter,
//                       alltoall, barrier                             (default allreduce)
//   --algo              algorithm(s), comma-separated; one sweep each (default: the tool's)
//   --json FILE         also write every row, the machine and its limits to FILE
//   --settle_ms MS      run the first size untimed for at least MS ms before the sweep (0)
//   --limits 0|1        measure and print the machine limits first  (default 1)
// plus the flags a tool declares for itself (e.g. --transport, --store).
#ifndef CHORUS_BENCHMARKS_REPORT_H_
#define CHORUS_BENCHMARKS_REPORT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "chorus/benchmarks/machine_limits.h"
#include "chorus/collectives/collective_kind.h"
#include "chorus/core/types.h"

namespace chorus::bench {

struct BenchmarkOptions {
  CollectiveKind collective = CollectiveKind::kAllReduce;
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{64} << 20;
  int64_t step_factor = 2;
  int iterations = 20;
  int warmup_iterations = 5;
  int check_iterations = 1;
  // The type and op of one sweep; ForEachTypeAndOp sets them from the lists.
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::vector<DataType> types = {DataType::kFloat32};  // -d
  std::vector<ReduceOp> ops = {ReduceOp::kSum};        // -o
  int root = 0;
  std::vector<std::string> algorithms;  // empty: the tool's default
  std::string json_path;                // empty: no JSON
  bool probe_limits = true;
  int settle_ms = 0;                              // --settle_ms
  std::map<std::string, std::string> tool_flags;  // the tool's own flags, by long name
  bool help = false;                              // -h / --help was given
};

// A flag a tool adds to the common ones: --name VALUE, with a default and a help line.
struct ToolFlag {
  std::string name;
  std::string default_value;
  std::string help;
};

// Parses argv[1..]. Every tool flag appears in `tool_flags` of the result (with its default
// when not given). Unknown flags and bad values give InvalidArgument naming the flag.
absl::StatusOr<BenchmarkOptions> ParseBenchmarkFlags(int argc, const char* const* argv,
                                                     absl::Span<const ToolFlag> tool_flags);

// The usage text: the common flags above plus the tool's.
std::string BenchmarkUsage(absl::string_view program, absl::Span<const ToolFlag> tool_flags);

// One copy of `options` per sweep of -d and -o: every type, times every op for collectives
// that reduce (the others take the first op), with `type` and `op` set.
std::vector<BenchmarkOptions> SweepsByTypeAndOp(const BenchmarkOptions& options);

// Checks what needs the rank count: root in range, sizes usable for the collective.
absl::Status ValidateForRanks(const BenchmarkOptions& options, int ranks);

// The sizes of the sweep in bytes: min, min*f, ... up to max, each rounded down to a whole
// number of elements (times the rank count for collectives that split the array) and never
// below one such unit. Barrier sweeps a single size, 0.
std::vector<int64_t> SweepSizes(const BenchmarkOptions& options, int ranks);

// One timed mode (out-of-place or in-place) of one row.
struct Measurement {
  double time_us = 0;     // mean time per iteration, the maximum over ranks
  double algbw_gbps = 0;  // bytes / time, GB = 1e9 B
  double busbw_gbps = 0;  // algbw x BusBandwidthFactor
  int64_t wrong = -1;     // wrong elements summed over ranks and check iterations; -1: unchecked
};

Measurement MakeMeasurement(CollectiveKind collective, int ranks, int64_t bytes, double seconds,
                            int64_t wrong);

struct ResultRow {
  int64_t bytes = 0;
  int64_t count = 0;                        // elements of the full array
  std::optional<Measurement> out_of_place;  // nullopt: the library cannot do it
  std::optional<Measurement> in_place;
};

// What one sweep measured, with what it needs to be read later.
struct RunReport {
  std::string library;          // "chorus" or "gloo"
  std::string library_version;  // e.g. a git description or the Debian package version
  std::string algorithm;
  std::string transport;
  std::string store;  // "file" or "redis"
  int ranks = 0;
  BenchmarkOptions options;
  std::vector<ResultRow> rows;
};

// The table, nccl-tests style.
std::string FormatTableHeader(const RunReport& run);
std::string FormatRow(const RunReport& run, const ResultRow& row);
std::string FormatFooter(const RunReport& run);

// Mean busbw over every measured mode of every row; 0 when there is none.
double AverageBusBandwidth(const std::vector<ResultRow>& rows);
// Sum of #wrong over every checked mode; 0 when nothing was checked.
int64_t TotalWrong(const std::vector<ResultRow>& rows);

// OK when no run found a wrong element; otherwise an error naming each run that did, so the
// tool exits non-zero (as nccl-tests does) after printing and writing everything.
absl::Status CheckNoWrongElements(const std::vector<RunReport>& runs);

// The JSON document (schema "chorus-bench/1", see docs/benchmarks.md).
std::string ReportJson(absl::string_view command_line, const MachineDescription& machine,
                       const std::optional<MachineLimits>& limits,
                       const std::vector<RunReport>& runs);

// Writes `text` to `path` (replacing it); the error names the path.
absl::Status WriteFile(const std::string& path, absl::string_view text);

// The words of a command line joined by spaces, as the JSON report records it.
std::string CommandLine(int argc, char** argv);

// How a benchmark tool ends its run: rank 0 writes the JSON report to `options.json_path` (if
// given) with `command_line`, then every rank returns CheckNoWrongElements(runs).
absl::Status FinishRun(int rank, const BenchmarkOptions& options, absl::string_view command_line,
                       const MachineDescription& machine,
                       const std::optional<MachineLimits>& limits,
                       const std::vector<RunReport>& runs);

// A benchmark tool's main(): runs `tool_main`; on an error prints "<tool>: <error>" and
// returns 1.
int RunTool(const char* tool, absl::Status (*tool_main)(int, char**), int argc, char** argv);

}  // namespace chorus::bench

#endif  // CHORUS_BENCHMARKS_REPORT_H_
