#include "chorus/benchmarks/report.h"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "chorus/collectives/shape.h"
#include "chorus/core/env.h"
#include "chorus/core/json.h"
#include "chorus/core/status.h"

namespace chorus::bench {
namespace {

// --- flags -----------------------------------------------------------------------------------

absl::Status ParseInt(absl::string_view flag, absl::string_view text, int64_t min_value,
                      int64_t* out) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min_value) {
    return InvalidArgumentError(
        absl::StrCat(flag, " '", text, "' is not an integer >= ", min_value));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status ParseSmallInt(absl::string_view flag, absl::string_view text, int min_value,
                           int* out) {
  int64_t value = 0;
  CHORUS_RETURN_IF_ERROR(ParseInt(flag, text, min_value, &value));
  if (value > 1000000000) {
    return InvalidArgumentError(absl::StrCat(flag, " '", text, "' is too large"));
  }
  *out = static_cast<int>(value);
  return absl::OkStatus();
}

absl::Status ParseSize(absl::string_view flag, absl::string_view text, int64_t* out) {
  auto bytes = ParseBytes(text);
  if (!bytes.ok()) return Annotate(bytes.status(), flag);
  *out = *bytes;
  return absl::OkStatus();
}

// The collectives the benchmarks measure (verify.cc knows their results), by the library's
// names; InvalidArgument listing them for any other name.
absl::StatusOr<CollectiveKind> ParseMeasuredCollective(absl::string_view name) {
  static constexpr CollectiveKind kMeasured[] = {
      CollectiveKind::kAllReduce, CollectiveKind::kBroadcast,     CollectiveKind::kReduce,
      CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllToAll,
      CollectiveKind::kBarrier};
  const absl::StatusOr<CollectiveKind> kind = ParseCollectiveKind(name);
  if (kind.ok() && absl::c_linear_search(kMeasured, *kind)) return *kind;
  return InvalidArgumentError(
      absl::StrCat("unknown collective '", name, "'; expected one of ",
                   absl::StrJoin(kMeasured, ", ", [](std::string* out, CollectiveKind measured) {
                     absl::StrAppend(out, CollectiveKindName(measured));
                   })));
}

// "all" (every value of an enum with `count` values, in enum order) or a comma-separated list
// of names that `parse` understands; InvalidArgument naming the flag otherwise.
template <typename Enum>
absl::StatusOr<std::vector<Enum>> ParseList(absl::string_view flag, absl::string_view text,
                                            int count,
                                            absl::StatusOr<Enum> (*parse)(absl::string_view)) {
  std::vector<Enum> values;
  if (text == "all") {
    for (int i = 0; i < count; ++i) values.push_back(static_cast<Enum>(i));
    return values;
  }
  for (absl::string_view name : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    absl::StatusOr<Enum> value = parse(name);
    if (!value.ok()) return Annotate(value.status(), flag);
    values.push_back(*value);
  }
  if (values.empty()) return InvalidArgumentError(absl::StrCat(flag, " needs at least one name"));
  return values;
}

// One common flag: its names, its help line and how it sets the options.
struct CommonFlag {
  const char* short_name;  // "" when none
  const char* long_name;
  const char* help;
  std::function<absl::Status(absl::string_view value, BenchmarkOptions& options)> set;
};

const std::vector<CommonFlag>& CommonFlags() {
  static const auto* flags = new std::vector<CommonFlag>{
      {"-b", "--minbytes", "smallest size in bytes (8, 64k, 4M, 1G)  [8]",
       [](absl::string_view v, BenchmarkOptions& o) { return ParseSize("-b", v, &o.min_bytes); }},
      {"-e", "--maxbytes", "largest size in bytes  [64M]",
       [](absl::string_view v, BenchmarkOptions& o) { return ParseSize("-e", v, &o.max_bytes); }},
      {"-f", "--stepfactor", "size multiplier between rows, >= 2  [2]",
       [](absl::string_view v, BenchmarkOptions& o) {
         return ParseInt("-f", v, 2, &o.step_factor);
       }},
      {"-n", "--iters", "timed iterations per size  [20]",
       [](absl::string_view v, BenchmarkOptions& o) {
         return ParseSmallInt("-n", v, 1, &o.iterations);
       }},
      {"-w", "--warmup_iters", "untimed warm-up iterations per size  [5]",
       [](absl::string_view v, BenchmarkOptions& o) {
         return ParseSmallInt("-w", v, 0, &o.warmup_iterations);
       }},
      {"-c", "--check", "checked iterations per size, apart from the timed ones; 0: none  [1]",
       [](absl::string_view v, BenchmarkOptions& o) {
         return ParseSmallInt("-c", v, 0, &o.check_iterations);
       }},
      {"-d", "--datatype",
       "element type(s), comma-separated, or all: float32, float64, float16, bfloat16, int8, "
       "...  [float32]",
       [](absl::string_view v, BenchmarkOptions& o) -> absl::Status {
         CHORUS_ASSIGN_OR_RETURN(o.types,
                                 ParseList<DataType>("-d", v, kNumDataTypes, ParseDataType));
         o.type = o.types.front();
         return absl::OkStatus();
       }},
      {"-o", "--op", "reduction(s), comma-separated, or all: sum, prod, min, max, avg  [sum]",
       [](absl::string_view v, BenchmarkOptions& o) -> absl::Status {
         CHORUS_ASSIGN_OR_RETURN(o.ops, ParseList<ReduceOp>("-o", v, kNumReduceOps, ParseReduceOp));
         o.op = o.ops.front();
         return absl::OkStatus();
       }},
      {"-r", "--root", "root rank of broadcast and reduce  [0]",
       [](absl::string_view v, BenchmarkOptions& o) { return ParseSmallInt("-r", v, 0, &o.root); }},
      {"", "--coll",
       "collective: allreduce, broadcast, reduce, allgather, reduce_scatter, alltoall, barrier  "
       "[allreduce]",
       [](absl::string_view v, BenchmarkOptions& o) -> absl::Status {
         CHORUS_ASSIGN_OR_RETURN(o.collective, ParseMeasuredCollective(v));
         return absl::OkStatus();
       }},
      {"", "--algo", "algorithm(s), comma-separated; one sweep each  [the tool's default]",
       [](absl::string_view v, BenchmarkOptions& o) {
         o.algorithms = absl::StrSplit(v, ',', absl::SkipEmpty());
         return o.algorithms.empty() ? InvalidArgumentError("--algo needs at least one name")
                                     : absl::OkStatus();
       }},
      {"", "--json", "also write the rows, the machine and its limits to this file",
       [](absl::string_view v, BenchmarkOptions& o) {
         o.json_path = std::string(v);
         return absl::OkStatus();
       }},
      {"", "--settle_ms",
       "before the first size, run its collective in place, untimed, for at least this many "
       "milliseconds (the same calls on every rank), so that the scheduler's placing of freshly "
       "started ranks stays out of the figures  [0]",
       [](absl::string_view v, BenchmarkOptions& o) {
         return ParseSmallInt("--settle_ms", v, 0, &o.settle_ms);
       }},
      {"", "--limits", "1: measure and print the machine limits first; 0: skip  [1]",
       [](absl::string_view v, BenchmarkOptions& o) {
         if (v != "0" && v != "1") return InvalidArgumentError("--limits takes 0 or 1");
         o.probe_limits = v == "1";
         return absl::OkStatus();
       }},
  };
  return *flags;
}

// --- table -----------------------------------------------------------------------------------

constexpr absl::string_view kNotApplicable = "N/A";

std::string FormatTime(double us) {
  if (us >= 10000) return absl::StrFormat("%7.0f", us);
  if (us >= 100) return absl::StrFormat("%7.1f", us);
  return absl::StrFormat("%7.2f", us);
}

std::string FormatMode(const std::optional<Measurement>& m) {
  if (!m) {
    return absl::StrFormat("  %7s  %6s  %6s  %6s", kNotApplicable, kNotApplicable, kNotApplicable,
                           kNotApplicable);
  }
  const std::string wrong = m->wrong < 0 ? std::string(kNotApplicable) : absl::StrCat(m->wrong);
  return absl::StrFormat("  %s  %6.2f  %6.2f  %6s", FormatTime(m->time_us), m->algbw_gbps,
                         m->busbw_gbps, wrong);
}

// Widths of the row's leading columns (size .. root) and of one mode (time .. #wrong).
constexpr size_t kRowHeadWidth = 52;
constexpr size_t kModeWidth = 33;

std::string Centered(absl::string_view text, size_t width) {
  const size_t left = (width - text.size()) / 2;
  return std::string(left, ' ') + std::string(text) + std::string(width - left - text.size(), ' ');
}

std::string CommentLine(std::string line) {
  line[0] = '#';
  return line + "\n";
}

// --- JSON ------------------------------------------------------------------------------------

std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  return absl::StrFormat("%.6g", value);
}

// Joins "key": value members into an object.
std::string JsonObject(const std::vector<std::pair<std::string, std::string>>& members) {
  std::vector<std::string> parts;
  parts.reserve(members.size());
  for (const auto& [key, value] : members) parts.push_back(JsonString(key) + ": " + value);
  return "{" + absl::StrJoin(parts, ", ") + "}";
}

std::string MeasurementJson(const std::optional<Measurement>& m) {
  if (!m) return "null";
  return JsonObject({{"time_us", JsonNumber(m->time_us)},
                     {"algbw_gbps", JsonNumber(m->algbw_gbps)},
                     {"busbw_gbps", JsonNumber(m->busbw_gbps)},
                     {"wrong", m->wrong < 0 ? "null" : absl::StrCat(m->wrong)}});
}

std::string MachineJson(const MachineDescription& machine) {
  return JsonObject({{"hostname", JsonString(machine.hostname)},
                     {"cpu_model", JsonString(machine.cpu_model)},
                     {"online_cores", absl::StrCat(machine.online_cores)},
                     {"memory_bytes", absl::StrCat(machine.memory_bytes)},
                     {"kernel", JsonString(machine.kernel)}});
}

std::string LimitsJson(const std::optional<MachineLimits>& limits) {
  if (!limits) return "null";
  return JsonObject(
      {{"memcpy_gbps", JsonNumber(limits->memcpy_gbps)},
       {"reduce_float_sum_gbps", JsonNumber(limits->reduce_float_sum_gbps)},
       {"tcp_one_way_gbps", JsonNumber(limits->tcp_one_way_gbps)},
       {"tcp_bidirectional_gbps_per_direction",
        JsonNumber(limits->tcp_bidirectional_gbps_per_direction)},
       {"tcp_rtt_median_us", JsonNumber(limits->tcp_rtt_median_us)},
       {"tcp_rtt_busy_poll_median_us", JsonNumber(limits->tcp_rtt_busy_poll_median_us)},
       {"cache_line_handoff_median_ns", JsonNumber(limits->cache_line_handoff_median_ns)},
       {"tcp_one_way_bytes", absl::StrCat(limits->tcp_one_way_bytes)},
       {"tcp_bidirectional_bytes", absl::StrCat(limits->tcp_bidirectional_bytes)},
       {"rtt_samples", absl::StrCat(limits->rtt_samples)},
       {"probe_seconds", JsonNumber(absl::ToDoubleSeconds(limits->probe_time))}});
}

std::string RedOpName(const RunReport& run) {
  return IsReduction(run.options.collective) ? std::string(ReduceOpName(run.options.op)) : "none";
}

int RootColumn(const RunReport& run) {
  return IsRooted(run.options.collective) ? run.options.root : -1;
}

std::string RunJson(const RunReport& run) {
  const BenchmarkOptions& o = run.options;
  std::vector<std::string> rows;
  rows.reserve(run.rows.size());
  for (const ResultRow& row : run.rows) {
    rows.push_back(JsonObject({{"bytes", absl::StrCat(row.bytes)},
                               {"count", absl::StrCat(row.count)},
                               {"type", JsonString(DataTypeName(o.type))},
                               {"redop", JsonString(RedOpName(run))},
                               {"root", absl::StrCat(RootColumn(run))},
                               {"out_of_place", MeasurementJson(row.out_of_place)},
                               {"in_place", MeasurementJson(row.in_place)}}));
  }
  return JsonObject({{"library", JsonString(run.library)},
                     {"library_version", JsonString(run.library_version)},
                     {"collective", JsonString(CollectiveKindName(o.collective))},
                     {"algorithm", JsonString(run.algorithm)},
                     {"transport", JsonString(run.transport)},
                     {"store", JsonString(run.store)},
                     {"ranks", absl::StrCat(run.ranks)},
                     {"datatype", JsonString(DataTypeName(o.type))},
                     {"op", JsonString(RedOpName(run))},
                     {"root", absl::StrCat(RootColumn(run))},
                     {"iterations", absl::StrCat(o.iterations)},
                     {"warmup_iterations", absl::StrCat(o.warmup_iterations)},
                     {"check_iterations", absl::StrCat(o.check_iterations)},
                     {"avg_busbw_gbps", JsonNumber(AverageBusBandwidth(run.rows))},
                     {"wrong_total", absl::StrCat(TotalWrong(run.rows))},
                     {"rows", "[\n      " + absl::StrJoin(rows, ",\n      ") + "]"}});
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace

absl::StatusOr<BenchmarkOptions> ParseBenchmarkFlags(int argc, const char* const* argv,
                                                     absl::Span<const ToolFlag> tool_flags) {
  BenchmarkOptions options;
  for (const ToolFlag& flag : tool_flags) options.tool_flags[flag.name] = flag.default_value;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      options.help = true;
      continue;
    }
    // "--name=value" or "--name value" / "-x value".
    absl::string_view name = arg;
    std::optional<absl::string_view> value;
    const size_t equals = arg.find('=');
    if (absl::StartsWith(arg, "--") && equals != absl::string_view::npos) {
      name = arg.substr(0, equals);
      value = arg.substr(equals + 1);
    }
    const auto next_value = [&]() -> absl::StatusOr<absl::string_view> {
      if (value) return *value;
      if (i + 1 >= argc) return InvalidArgumentError(absl::StrCat(name, " needs a value"));
      return absl::string_view(argv[++i]);
    };
    bool known = false;
    for (const CommonFlag& flag : CommonFlags()) {
      if (name != flag.short_name && name != flag.long_name) continue;
      CHORUS_ASSIGN_OR_RETURN(const absl::string_view text, next_value());
      CHORUS_RETURN_IF_ERROR(flag.set(text, options));
      known = true;
      break;
    }
    for (const ToolFlag& flag : tool_flags) {
      if (known || name != "--" + flag.name) continue;
      CHORUS_ASSIGN_OR_RETURN(const absl::string_view text, next_value());
      options.tool_flags[flag.name] = std::string(text);
      known = true;
    }
    if (!known) {
      return InvalidArgumentError(absl::StrCat("unknown flag '", arg, "' (see --help)"));
    }
  }
  if (options.max_bytes < options.min_bytes) {
    return InvalidArgumentError(
        absl::StrCat("-e ", options.max_bytes, " is below -b ", options.min_bytes));
  }
  return options;
}

std::string BenchmarkUsage(absl::string_view program, absl::Span<const ToolFlag> tool_flags) {
  std::string usage = absl::StrCat("usage: ", program, " [flags]\n");
  for (const CommonFlag& flag : CommonFlags()) {
    const std::string names =
        *flag.short_name ? absl::StrCat(flag.short_name, ", ", flag.long_name) : flag.long_name;
    absl::StrAppendFormat(&usage, "  %-20s %s\n", names, flag.help);
  }
  for (const ToolFlag& flag : tool_flags) {
    absl::StrAppendFormat(&usage, "  %-20s %s  [%s]\n", "--" + flag.name, flag.help,
                          flag.default_value);
  }
  return usage;
}

std::vector<BenchmarkOptions> SweepsByTypeAndOp(const BenchmarkOptions& options) {
  std::vector<BenchmarkOptions> sweeps;
  const size_t ops = IsReduction(options.collective) ? options.ops.size() : 1;
  for (DataType type : options.types) {
    for (size_t i = 0; i < ops; ++i) {
      BenchmarkOptions sweep = options;
      sweep.type = type;
      sweep.op = options.ops[i];
      sweeps.push_back(std::move(sweep));
    }
  }
  return sweeps;
}

absl::Status ValidateForRanks(const BenchmarkOptions& options, int ranks) {
  if (IsRooted(options.collective) && options.root >= ranks) {
    return InvalidArgumentError(
        absl::StrCat("-r ", options.root, " is not a rank of this ", ranks, "-rank job"));
  }
  return absl::OkStatus();
}

std::vector<int64_t> SweepSizes(const BenchmarkOptions& options, int ranks) {
  if (options.collective == CollectiveKind::kBarrier) return {0};
  const int64_t unit = static_cast<int64_t>(DataTypeSize(options.type)) *
                       ArrayGranularity(options.collective, ranks);
  std::vector<int64_t> sizes;
  for (int64_t size = options.min_bytes; size <= options.max_bytes;) {
    const int64_t bytes = std::max(unit, size / unit * unit);
    if (sizes.empty() || sizes.back() != bytes) sizes.push_back(bytes);
    if (size == 0) size = 1;
    if (size > options.max_bytes / options.step_factor) break;
    size *= options.step_factor;
  }
  return sizes;
}

Measurement MakeMeasurement(CollectiveKind collective, int ranks, int64_t bytes, double seconds,
                            int64_t wrong) {
  Measurement m;
  m.time_us = seconds * 1e6;
  m.algbw_gbps = seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0;
  m.busbw_gbps = m.algbw_gbps * BusBandwidthFactor(collective, ranks);
  m.wrong = wrong;
  return m;
}

std::string FormatTableHeader(const RunReport& run) {
  const BenchmarkOptions& o = run.options;
  std::string text = absl::StrFormat(
      "# %s-bench %s: %s, algorithm %s, transport %s, store %s, %d ranks\n"
      "#   sizes %d..%d bytes x%d, %d timed + %d warm-up iterations, %d checked apart\n",
      run.library, run.library_version, CollectiveKindName(o.collective), run.algorithm,
      run.transport, run.store, run.ranks, o.min_bytes, o.max_bytes, o.step_factor, o.iterations,
      o.warmup_iterations, o.check_iterations);
  text += CommentLine(std::string(kRowHeadWidth, ' ') + Centered("out-of-place", kModeWidth) +
                      Centered("in-place", kModeWidth));
  const std::string mode_names =
      absl::StrFormat("  %7s  %6s  %6s  %6s", "time", "algbw", "busbw", "#wrong");
  text += CommentLine(
      absl::StrFormat("%12s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root") +
      mode_names + mode_names);
  const std::string mode_units =
      absl::StrFormat("  %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
  text +=
      CommentLine(absl::StrFormat("%12s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "") +
                  mode_units + mode_units);
  return text;
}

std::string FormatRow(const RunReport& run, const ResultRow& row) {
  return absl::StrFormat("%12d  %12d  %8s  %6s  %6d", row.bytes, row.count,
                         DataTypeName(run.options.type), RedOpName(run), RootColumn(run)) +
         FormatMode(row.out_of_place) + FormatMode(row.in_place) + "\n";
}

std::string FormatFooter(const RunReport& run) {
  bool checked = false;
  for (const ResultRow& row : run.rows) {
    for (const auto* mode : {&row.out_of_place, &row.in_place}) {
      if (*mode && (*mode)->wrong >= 0) checked = true;
    }
  }
  const int64_t wrong = TotalWrong(run.rows);
  const std::string verdict =
      !checked ? "not checked" : absl::StrCat(wrong, wrong == 0 ? " OK" : " FAILED");
  return absl::StrFormat("# Wrong elements       : %s\n# Avg bus bandwidth    : %.4g\n#\n", verdict,
                         AverageBusBandwidth(run.rows));
}

double AverageBusBandwidth(const std::vector<ResultRow>& rows) {
  double sum = 0;
  int measured = 0;
  for (const ResultRow& row : rows) {
    for (const auto* mode : {&row.out_of_place, &row.in_place}) {
      if (!*mode) continue;
      sum += (*mode)->busbw_gbps;
      ++measured;
    }
  }
  return measured > 0 ? sum / measured : 0;
}

int64_t TotalWrong(const std::vector<ResultRow>& rows) {
  int64_t wrong = 0;
  for (const ResultRow& row : rows) {
    for (const auto* mode : {&row.out_of_place, &row.in_place}) {
      if (*mode && (*mode)->wrong > 0) wrong += (*mode)->wrong;
    }
  }
  return wrong;
}

absl::Status CheckNoWrongElements(const std::vector<RunReport>& runs) {
  std::vector<std::string> failed;
  for (const RunReport& run : runs) {
    const int64_t wrong = TotalWrong(run.rows);
    if (wrong > 0) {
      failed.push_back(absl::StrCat(wrong, " in ", run.library, " ", run.algorithm, " ",
                                    CollectiveKindName(run.options.collective)));
    }
  }
  if (failed.empty()) return absl::OkStatus();
  return InternalError(
      absl::StrCat("verification failed, wrong elements: ", absl::StrJoin(failed, "; "),
                   " (rows with a non-zero #wrong column are not correct)"));
}

std::string ReportJson(absl::string_view command_line, const MachineDescription& machine,
                       const std::optional<MachineLimits>& limits,
                       const std::vector<RunReport>& runs) {
  std::vector<std::string> run_texts;
  run_texts.reserve(runs.size());
  for (const RunReport& run : runs) run_texts.push_back(RunJson(run));
  return "{\n" +
         absl::StrJoin(
             std::vector<std::string>{
                 "  \"schema\": \"chorus-bench/1\"",
                 "  \"command\": " + JsonString(command_line),
                 "  \"started_at\": " + JsonString(UtcNow()),
                 "  \"machine\": " + MachineJson(machine),
                 "  \"limits\": " + LimitsJson(limits),
                 "  \"runs\": [\n    " + absl::StrJoin(run_texts, ",\n    ") + "]",
             },
             ",\n") +
         "\n}\n";
}

absl::Status WriteFile(const std::string& path, absl::string_view text) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return InvalidArgumentError(absl::StrCat("cannot write the JSON report to '", path, "'"));
  }
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) {
    return InternalError(absl::StrCat("writing the JSON report to '", path, "' failed"));
  }
  return absl::OkStatus();
}

std::string CommandLine(int argc, char** argv) {
  return absl::StrJoin(std::vector<std::string>(argv, argv + argc), " ");
}

absl::Status FinishRun(int rank, const BenchmarkOptions& options, absl::string_view command_line,
                       const MachineDescription& machine,
                       const std::optional<MachineLimits>& limits,
                       const std::vector<RunReport>& runs) {
  if (rank == 0 && !options.json_path.empty()) {
    CHORUS_RETURN_IF_ERROR(
        WriteFile(options.json_path, ReportJson(command_line, machine, limits, runs)));
  }
  return CheckNoWrongElements(runs);
}

int RunTool(const char* tool, absl::Status (*tool_main)(int, char**), int argc, char** argv) {
  const absl::Status status = tool_main(argc, argv);
  if (status.ok()) return 0;
  std::fprintf(stderr, "%s: %s\n", tool, ErrorText(status).c_str());
  return 1;
}

}  // namespace chorus::bench
