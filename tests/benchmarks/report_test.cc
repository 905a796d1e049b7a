#include "chorus/benchmarks/report.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "chorus/collectives/shape.h"
#include "chorus/core/status.h"

namespace chorus::bench {
namespace {

absl::StatusOr<BenchmarkOptions> Parse(std::vector<const char*> args,
                                       std::vector<ToolFlag> tool_flags = {}) {
  args.insert(args.begin(), "bench");
  return ParseBenchmarkFlags(static_cast<int>(args.size()), args.data(), tool_flags);
}

TEST_CASE("nccl-tests flags parse, long and short") {
  const auto options =
      Parse({"-b",          "1k",          "--maxbytes=4M",
             "-f",          "4",           "-n",
             "7",           "-w",          "0",
             "-c",          "3",           "-d",
             "bf16",        "-o",          "max",
             "-r",          "2",           "--coll",
             "broadcast",   "--algo",      "ring,bcube",
             "--json",      "/tmp/x.json", "--settle_ms",
             "250",         "--limits",    "0",
             "--transport", "shm"},
            {{"transport", "tcp", "transport to use"}, {"store", "file", "store kind"}});
  REQUIRE(options.ok());
  CHECK(options->min_bytes == 1024);
  CHECK(options->max_bytes == 4 << 20);
  CHECK(options->step_factor == 4);
  CHECK(options->iterations == 7);
  CHECK(options->warmup_iterations == 0);
  CHECK(options->check_iterations == 3);
  CHECK(options->type == DataType::kBFloat16);
  CHECK(options->op == ReduceOp::kMax);
  CHECK(options->root == 2);
  CHECK(options->collective == CollectiveKind::kBroadcast);
  CHECK(options->algorithms == std::vector<std::string>{"ring", "bcube"});
  CHECK(options->json_path == "/tmp/x.json");
  CHECK(!options->probe_limits);
  CHECK(options->settle_ms == 250);
  CHECK(options->tool_flags.at("transport") == "shm");
  CHECK(options->tool_flags.at("store") == "file");  // the default
  CHECK(!options->help);
}

TEST_CASE("-d and -o take lists and all; one sweep per type and, for reductions, per op") {
  const auto all = Parse({"-d", "all", "-o", "all"});
  REQUIRE(all.ok());
  CHECK(all->types.size() == static_cast<size_t>(kNumDataTypes));
  CHECK(all->ops.size() == static_cast<size_t>(kNumReduceOps));
  const std::vector<BenchmarkOptions> sweeps = SweepsByTypeAndOp(*all);
  REQUIRE(sweeps.size() == static_cast<size_t>(kNumDataTypes * kNumReduceOps));
  CHECK(sweeps.front().type == DataType::kInt8);
  CHECK(sweeps.front().op == ReduceOp::kSum);
  CHECK(sweeps.back().type == DataType::kUint16);  // enum order: the 16-bit types came last
  CHECK(sweeps.back().op == ReduceOp::kAvg);

  const auto listed = Parse({"-d", "float16,int32", "-o", "min,max", "--coll", "broadcast"});
  REQUIRE(listed.ok());
  CHECK(listed->type == DataType::kFloat16);  // the first, for single-sweep readers
  const std::vector<BenchmarkOptions> broadcasts = SweepsByTypeAndOp(*listed);
  REQUIRE(broadcasts.size() == 2);  // broadcast does not reduce: ops do not multiply
  CHECK(broadcasts[0].type == DataType::kFloat16);
  CHECK(broadcasts[1].type == DataType::kInt32);

  const auto defaults = Parse({});
  REQUIRE(defaults.ok());
  REQUIRE(SweepsByTypeAndOp(*defaults).size() == 1);
  CHECK(SweepsByTypeAndOp(*defaults)[0].type == DataType::kFloat32);
  CHECK(SweepsByTypeAndOp(*defaults)[0].op == ReduceOp::kSum);
}

TEST_CASE("bad flags are refused with the flag named") {
  const auto mentions = [](const absl::StatusOr<BenchmarkOptions>& options,
                           const std::string& text) {
    return GetErrorKind(options.status()) == ErrorKind::kInvalidArgument &&
           std::string(options.status().message()).find(text) != std::string::npos;
  };
  CHECK(mentions(Parse({"--bogus"}), "unknown flag '--bogus'"));
  CHECK(mentions(Parse({"-n"}), "-n needs a value"));
  CHECK(mentions(Parse({"-n", "0"}), "-n '0' is not an integer >= 1"));
  CHECK(mentions(Parse({"-f", "1"}), "-f '1'"));
  CHECK(mentions(Parse({"-b", "lots"}), "-b"));
  CHECK(mentions(Parse({"-b", "1M", "-e", "1k"}), "is below -b"));
  CHECK(mentions(Parse({"-d", "float8"}), "float8"));
  CHECK(mentions(Parse({"-d", "int32,float8"}), "-d"));
  CHECK(mentions(Parse({"-o", ","}), "-o needs at least one name"));
  CHECK(mentions(Parse({"--coll", "scan"}), "unknown collective 'scan'"));
  CHECK(mentions(Parse({"--limits", "yes"}), "--limits"));
  CHECK(mentions(Parse({"--settle_ms", "-1"}), "--settle_ms"));
  CHECK(Parse({"--help"})->help);
}

TEST_CASE("the usage lists common and tool flags") {
  const std::string usage = BenchmarkUsage("gloo-bench", {{"store", "file", "file or redis"}});
  for (const char* text :
       {"-b, --minbytes", "-e, --maxbytes", "-f, --stepfactor", "-n, --iters", "-w, --warmup_iters",
        "-c, --check", "-d, --datatype", "-o, --op", "-r, --root", "--coll", "--algo", "--json",
        "--store", "file or redis  [file]"}) {
    CHECK(usage.find(text) != std::string::npos);
  }
}

TEST_CASE("sweep sizes follow -b -e -f, rounded to whole elements per rank") {
  BenchmarkOptions options;
  options.min_bytes = 8;
  options.max_bytes = 128;
  options.step_factor = 2;
  CHECK(SweepSizes(options, 4) == std::vector<int64_t>{8, 16, 32, 64, 128});

  options.collective = CollectiveKind::kAllGather;  // 3 ranks x 4 bytes per unit
  CHECK(SweepSizes(options, 3) == std::vector<int64_t>{12, 24, 60, 120});

  options.collective = CollectiveKind::kAllReduce;
  options.type = DataType::kFloat64;
  options.min_bytes = 0;
  options.max_bytes = 64;
  options.step_factor = 4;
  CHECK(SweepSizes(options, 2) == std::vector<int64_t>{8, 16, 64});

  options.collective = CollectiveKind::kBarrier;
  CHECK(SweepSizes(options, 2) == std::vector<int64_t>{0});
}

TEST_CASE("the root must be a rank of the job") {
  BenchmarkOptions options;
  options.collective = CollectiveKind::kReduce;
  options.root = 4;
  CHECK(GetErrorKind(ValidateForRanks(options, 4)) == ErrorKind::kInvalidArgument);
  CHECK(ValidateForRanks(options, 5).ok());
  options.collective = CollectiveKind::kAllReduce;  // no root: anything goes
  CHECK(ValidateForRanks(options, 4).ok());
}

TEST_CASE("bus bandwidth factors are nccl-tests'") {
  CHECK(BusBandwidthFactor(CollectiveKind::kAllReduce, 4) == Approx(1.5));
  CHECK(BusBandwidthFactor(CollectiveKind::kAllGather, 4) == Approx(0.75));
  CHECK(BusBandwidthFactor(CollectiveKind::kReduceScatter, 4) == Approx(0.75));
  CHECK(BusBandwidthFactor(CollectiveKind::kAllToAll, 4) == Approx(0.75));
  CHECK(BusBandwidthFactor(CollectiveKind::kBroadcast, 4) == 1);
  CHECK(BusBandwidthFactor(CollectiveKind::kReduce, 4) == 1);
  const Measurement m = MakeMeasurement(CollectiveKind::kAllReduce, 4, 1000000, 0.001, 0);
  CHECK(m.time_us == Approx(1000));
  CHECK(m.algbw_gbps == Approx(1.0));
  CHECK(m.busbw_gbps == Approx(1.5));
}

RunReport SampleRun() {
  RunReport run;
  run.library = "gloo";
  run.library_version = "0.5.0";
  run.algorithm = "ring";
  run.transport = "tcp";
  run.store = "file";
  run.ranks = 4;
  ResultRow small{1024, 256, MakeMeasurement(CollectiveKind::kAllReduce, 4, 1024, 20e-6, 0),
                  MakeMeasurement(CollectiveKind::kAllReduce, 4, 1024, 25e-6, 0)};
  ResultRow in_place_only{1 << 20, 1 << 18, std::nullopt,
                          MakeMeasurement(CollectiveKind::kAllReduce, 4, 1 << 20, 0.002, 3)};
  run.rows = {small, in_place_only};
  return run;
}

TEST_CASE("the table has nccl-tests columns, aligned, with N/A for what was not measured") {
  const RunReport run = SampleRun();
  const std::vector<std::string> header = absl::StrSplit(FormatTableHeader(run), '\n');
  REQUIRE(header.size() >= 5);
  CHECK(header[0].find("gloo-bench 0.5.0: allreduce, algorithm ring") != std::string::npos);
  const std::string& titles = header[2];
  const std::string& names = header[3];
  const std::string& units = header[4];
  CHECK(titles.find("out-of-place") != std::string::npos);
  CHECK(titles.find("in-place") != std::string::npos);
  CHECK(names.rfind("#       size         count      type   redop    root", 0) == 0);
  CHECK(names.find("time   algbw   busbw  #wrong") != std::string::npos);
  CHECK(units.find("(us)  (GB/s)  (GB/s)") != std::string::npos);

  const std::string first = FormatRow(run, run.rows[0]);
  const std::string second = FormatRow(run, run.rows[1]);
  CHECK(first.size() == names.size() + 1);  // + newline
  CHECK(second.size() == first.size());
  CHECK(first.find("        1024           256   float32     sum      -1") == 0);
  CHECK(first.find("  20.00    0.05    0.08       0") != std::string::npos);
  CHECK(second.find("     N/A     N/A     N/A     N/A") != std::string::npos);
  CHECK(second.find("   2000.0") != std::string::npos);

  const std::string footer = FormatFooter(run);
  CHECK(footer.find("# Wrong elements       : 3 FAILED") != std::string::npos);
  // Average busbw over the three measured modes.
  const double average = (0.0768 + 0.06144 + 0.786432) / 3;
  CHECK(AverageBusBandwidth(run.rows) == Approx(average).epsilon(1e-3));
  CHECK(footer.find("# Avg bus bandwidth    : 0.308") != std::string::npos);
  CHECK(TotalWrong(run.rows) == 3);
}

TEST_CASE("rows of rooted and non-reducing collectives show root and no op") {
  RunReport run = SampleRun();
  run.options.collective = CollectiveKind::kBroadcast;
  run.options.root = 1;
  CHECK(FormatRow(run, run.rows[0]).find("float32    none       1") != std::string::npos);
}

TEST_CASE("unchecked runs say so") {
  RunReport run = SampleRun();
  for (ResultRow& row : run.rows) {
    for (auto* mode : {&row.out_of_place, &row.in_place}) {
      if (*mode) (*mode)->wrong = -1;
    }
  }
  CHECK(FormatFooter(run).find("not checked") != std::string::npos);
  CHECK(FormatRow(run, run.rows[0]).find("N/A") != std::string::npos);
}

TEST_CASE("wrong elements make the run fail, naming the run") {
  RunReport run = SampleRun();
  const absl::Status status = CheckNoWrongElements({run});
  CHECK(GetErrorKind(status) == ErrorKind::kInternal);
  CHECK(std::string(status.message()).find("3 in gloo ring allreduce") != std::string::npos);
  run.rows.pop_back();
  CHECK(CheckNoWrongElements({run}).ok());
}

TEST_CASE("the JSON report carries the machine, the limits and every row") {
  MachineDescription machine;
  machine.hostname = "host \"one\"";
  machine.online_cores = 2;
  MachineLimits limits;
  limits.memcpy_gbps = 10;
  const std::string json = ReportJson("gloo-bench -n 5", machine, limits, {SampleRun()});
  for (const char* text :
       {"\"schema\": \"chorus-bench/1\"", "\"command\": \"gloo-bench -n 5\"",
        "\"hostname\": \"host \\\"one\\\"\"", "\"memcpy_gbps\": 10", "\"library\": \"gloo\"",
        "\"algorithm\": \"ring\"", "\"collective\": \"allreduce\"", "\"ranks\": 4",
        "\"bytes\": 1024", "\"out_of_place\": null", "\"wrong\": 3", "\"wrong_total\": 3",
        "\"started_at\": \"20"}) {
    INFO(text);
    CHECK(json.find(text) != std::string::npos);
  }
  const std::string without_limits = ReportJson("x", machine, std::nullopt, {});
  CHECK(without_limits.find("\"limits\": null") != std::string::npos);
  CHECK(without_limits.find("\"runs\": [\n    ]") != std::string::npos);
}

}  // namespace
}  // namespace chorus::bench
