// mpi-bench: the nccl-tests-style sweep of chorus-bench, run on Open MPI's own collectives
// (MPI_Allreduce, MPI_Bcast, MPI_Barrier over MPI_FLOAT on MPI_COMM_WORLD, with whatever
// algorithm Open MPI's tuned component picks), so that Chorus is compared with Open MPI on the
// same machine, ranks, sizes, table and JSON schema. Start it with mpirun, which also chooses
// the transport (the byte transfer layer, BTL):
//
//   mpirun -np 4 --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo
//     bazel-bin/benchmarks/mpi/mpi_bench -b 8 -e 64M --transport tcp
//   mpirun -np 4 --mca pml ob1 --mca btl self,vader
//     bazel-bin/benchmarks/mpi/mpi_bench -b 8 -e 64M --transport shm
//
// --transport only labels the run; it is checked against the BTL list mpirun passes down
// (OMPI_MCA_btl) so that a run cannot be labelled with a transport it did not use. Allreduce
// is measured out of place and in place (MPI_IN_PLACE); MPI_Bcast has one buffer, so broadcast
// is in place only.
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "chorus/benchmarks/machine_limits.h"
#include "chorus/benchmarks/report.h"
#include "chorus/benchmarks/sweep.h"
#include "chorus/core/env.h"
#include "chorus/core/status.h"
#include "openmpi/mpi.h"

namespace chorus::bench {
namespace {

constexpr char kDefaultAlgorithm[] = "default";

const std::vector<ToolFlag>& MpiFlags() {
  static const auto* flags = new std::vector<ToolFlag>{
      {"transport", "",
       "label of the BTL mpirun selected: tcp (--mca btl self,tcp) or shm (--mca btl "
       "self,vader); default: read from the BTL list mpirun passes down"},
  };
  return *flags;
}

// An MPI return code as a status naming the call; OK for MPI_SUCCESS. Needs the error handler
// MPI_ERRORS_RETURN, which Main installs: the default one aborts the job instead of returning.
absl::Status FromMpi(int code, absl::string_view call) {
  if (code == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  const std::string message =
      absl::StrCat(call, " failed: ", length > 0 ? std::string(text, length) : "no description",
                   " (MPI error ", code, ")");
  int error_class = MPI_ERR_OTHER;
  MPI_Error_class(code, &error_class);
  switch (error_class) {
    case MPI_ERR_BUFFER:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_ROOT:
    case MPI_ERR_OP:
    case MPI_ERR_ARG:
    case MPI_ERR_COMM:
      return InvalidArgumentError(message);
    case MPI_ERR_INTERN:
      return InternalError(message);
    default:
      // What a collective reports when the exchange itself failed (a peer gone, a broken link).
      return PeerUnavailableError(message);
  }
}

absl::StatusOr<MPI_Op> MpiReduction(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kProd:
      return MPI_PROD;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kAvg:
      break;
  }
  return InvalidArgumentError("MPI has no avg reduction; use -o sum, prod, min or max");
}

// The library's own version ("Open MPI v4.1.4, package: ..." -> "4.1.4"): the one that ran,
// which may differ from the headers this binary was built with.
std::string MpiVersion() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS || length <= 0) {
    return absl::StrCat(OMPI_MAJOR_VERSION, ".", OMPI_MINOR_VERSION, ".", OMPI_RELEASE_VERSION);
  }
  absl::string_view version(text, static_cast<size_t>(length));
  version = version.substr(0, version.find(','));
  absl::ConsumePrefix(&version, "Open MPI v");
  return std::string(version);
}

class MpiTarget : public CollectiveTarget {
 public:
  MpiTarget(const BenchmarkOptions& options, MPI_Op op, int rank, int ranks)
      : options_(options), op_(op), rank_(rank), ranks_(ranks) {}

  int rank() const override { return rank_; }
  int ranks() const override { return ranks_; }
  bool SupportsOutOfPlace() const override {
    return options_.collective == CollectiveKind::kAllReduce;
  }

  absl::Status Bind(void* input, void* output, int64_t count) override {
    if (count > std::numeric_limits<int>::max()) {
      return InvalidArgumentError("MPI counts elements in an int; lower -e");
    }
    // The MPI standard's in-place form: MPI_IN_PLACE as the send buffer of every rank.
    input_ = input == output ? MPI_IN_PLACE : input;
    output_ = output;
    count_ = static_cast<int>(count);
    return absl::OkStatus();
  }

  absl::Status Run() override {
    switch (options_.collective) {
      case CollectiveKind::kAllReduce:
        return FromMpi(MPI_Allreduce(input_, output_, count_, MPI_FLOAT, op_, MPI_COMM_WORLD),
                       "MPI_Allreduce");
      case CollectiveKind::kBroadcast:
        return FromMpi(MPI_Bcast(output_, count_, MPI_FLOAT, options_.root, MPI_COMM_WORLD),
                       "MPI_Bcast");
      default:
        return FromMpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    }
  }

  absl::StatusOr<double> MaxOverRanks(double value) override {
    CHORUS_RETURN_IF_ERROR(
        FromMpi(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
                "MPI_Allreduce (slowest rank's time)"));
    return value;
  }

  absl::StatusOr<int64_t> SumOverRanks(int64_t value) override {
    CHORUS_RETURN_IF_ERROR(
        FromMpi(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD),
                "MPI_Allreduce (wrong elements)"));
    return value;
  }

  absl::Status Barrier() override {
    return FromMpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  }

 private:
  const BenchmarkOptions& options_;
  const MPI_Op op_;
  const int rank_;
  const int ranks_;
  const void* input_ = nullptr;
  void* output_ = nullptr;
  int count_ = 0;
};

// What mpi-bench can measure; InvalidArgument naming the alternative otherwise. Checked before
// MPI_Init, so every rank stops with the same message.
absl::Status CheckSupported(const BenchmarkOptions& options) {
  if (options.collective != CollectiveKind::kAllReduce &&
      options.collective != CollectiveKind::kBroadcast &&
      options.collective != CollectiveKind::kBarrier) {
    return InvalidArgumentError(absl::StrCat(
        "mpi-bench measures allreduce, broadcast and barrier, not ",
        CollectiveKindName(options.collective)));
  }
  for (DataType type : options.types) {
    if (type != DataType::kFloat32) {
      return InvalidArgumentError("mpi-bench measures float32 only (-d float32)");
    }
  }
  for (ReduceOp op : IsReduction(options.collective) ? options.ops : std::vector<ReduceOp>{}) {
    CHORUS_RETURN_IF_ERROR(MpiReduction(op).status());
  }
  for (const std::string& algorithm : options.algorithms) {
    if (algorithm != kDefaultAlgorithm && algorithm != "all") {
      return InvalidArgumentError(absl::StrCat(
          "mpi-bench runs Open MPI's own choice only: --algo default (not '", algorithm,
          "'); steer it with mpirun --mca coll_tuned_* parameters instead"));
    }
  }
  return absl::OkStatus();
}

// The transport the BTL list names ("self,tcp" -> tcp, "self,vader" -> shm), or nullopt when
// it names both, neither, or excludes ("^tcp") rather than lists.
std::optional<std::string> TransportOfBtlList(absl::string_view btls) {
  if (absl::StartsWith(btls, "^")) return std::nullopt;
  bool tcp = false;
  bool shm = false;
  for (absl::string_view btl : absl::StrSplit(btls, ',', absl::SkipEmpty())) {
    tcp |= btl == "tcp";
    shm |= btl == "vader" || btl == "sm";
  }
  if (tcp == shm) return std::nullopt;
  return std::string(tcp ? "tcp" : "shm");
}

// The run's transport label: --transport, which must agree with the BTL list mpirun passed down
// when that names one; otherwise the one that list names. mpirun passes its --mca options to
// the ranks as OMPI_MCA_* variables.
absl::StatusOr<std::string> TransportLabel(const BenchmarkOptions& options) {
  const std::string& flag = options.tool_flags.at("transport");
  if (!flag.empty() && flag != "tcp" && flag != "shm") {
    return InvalidArgumentError(
        absl::StrCat("mpi_bench --transport: '", flag, "' is neither tcp nor shm"));
  }
  // The BTLs carry point-to-point traffic only under the ob1 PML; UCX (or cm and an MTL)
  // brings transports of its own and ignores the BTL list.
  const std::optional<std::string> pml = GetEnv("OMPI_MCA_pml");
  if (pml && !absl::StartsWith(*pml, "^") && *pml != "ob1") {
    return InvalidArgumentError(absl::StrCat(
        "mpi_bench: mpirun's --mca pml ", *pml,
        " ignores the BTL list, so the transport is unknown; use --mca pml ob1"));
  }
  const std::optional<std::string> btls = GetEnv("OMPI_MCA_btl");
  const std::optional<std::string> selected =
      btls ? TransportOfBtlList(*btls) : std::optional<std::string>();
  if (flag.empty()) {
    if (selected) return *selected;
    return InvalidArgumentError(
        "mpi_bench: give --transport tcp or shm, and select that BTL with mpirun --mca btl "
        "self,tcp or self,vader");
  }
  if (selected && *selected != flag) {
    return InvalidArgumentError(absl::StrCat("mpi_bench --transport ", flag,
                                             " contradicts mpirun's --mca btl ", *btls));
  }
  return flag;
}

// Errors on one rank in the middle of the sweep would leave the others waiting in their next
// collective: the whole job is stopped instead.
[[noreturn]] void AbortAllRanks(const absl::Status& status) {
  std::fprintf(stderr, "mpi_bench: %s\n", ErrorText(status).c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; this only tells the compiler so
}

// MPI_Init in Init, MPI_Finalize on destruction once Init has succeeded, on every path out of
// Main: mpirun counts a rank that exits without MPI_Finalize as failed. Errors are returned,
// not fatal.
class MpiSession {
 public:
  absl::Status Init(int* argc, char*** argv) {
    CHORUS_RETURN_IF_ERROR(FromMpi(MPI_Init(argc, argv), "MPI_Init"));
    initialized_ = true;
    return FromMpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
                   "MPI_Comm_set_errhandler");
  }
  ~MpiSession() {
    if (initialized_) MPI_Finalize();
  }

 private:
  bool initialized_ = false;
};

absl::Status Main(int argc, char** argv) {
  CHORUS_ASSIGN_OR_RETURN(const BenchmarkOptions options,
                          ParseBenchmarkFlags(argc, argv, MpiFlags()));
  if (options.help) {
    std::fputs(BenchmarkUsage("mpi_bench", MpiFlags()).c_str(), stdout);
    std::fputs("Run it under mpirun, which selects the BTL (--mca pml ob1 --mca btl ...).\n",
               stdout);
    return absl::OkStatus();
  }
  CHORUS_RETURN_IF_ERROR(CheckSupported(options));
  CHORUS_ASSIGN_OR_RETURN(const std::string transport, TransportLabel(options));
  // Before MPI_Init, which may take its own arguments out of argv.
  const std::string command_line = CommandLine(argc, argv);

  // The probe forks, which belongs before MPI_Init (Open MPI warns that a process forked after
  // it can break its transports), and the rank is only known after MPI_Init: mpirun's
  // environment says it before. Without mpirun this is a singleton,
  // rank 0. The other ranks wait for rank 0 in MPI_Init meanwhile.
  const MachineDescription machine = DescribeMachine();
  std::optional<MachineLimits> limits;
  const std::optional<std::string> launcher_rank = GetEnv("OMPI_COMM_WORLD_RANK");
  if ((!launcher_rank || *launcher_rank == "0") && options.probe_limits) {
    CHORUS_ASSIGN_OR_RETURN(limits, ProbeMachineLimits());
    std::fputs(FormatMachine(machine, *limits).c_str(), stdout);
    std::fflush(stdout);
  }

  MpiSession session;
  CHORUS_RETURN_IF_ERROR(session.Init(&argc, &argv));
  int rank = 0;
  int ranks = 0;
  CHORUS_RETURN_IF_ERROR(FromMpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank"));
  CHORUS_RETURN_IF_ERROR(FromMpi(MPI_Comm_size(MPI_COMM_WORLD, &ranks), "MPI_Comm_size"));
  // The same answer on every rank, so every rank returns and finalizes together.
  CHORUS_RETURN_IF_ERROR(ValidateForRanks(options, ranks));

  const std::string version = MpiVersion();
  std::vector<RunReport> runs;
  for (const BenchmarkOptions& sweep : SweepsByTypeAndOp(options)) {
    RunReport run;
    run.library = "openmpi";
    run.library_version = version;
    run.algorithm = kDefaultAlgorithm;
    run.transport = transport;
    run.store = "mpirun";  // ranks meet through mpirun's runtime, not a Chorus store
    run.ranks = ranks;
    run.options = sweep;
    const MPI_Op op =
        IsReduction(sweep.collective) ? MpiReduction(sweep.op).value() : MPI_OP_NULL;
    MpiTarget target(sweep, op, rank, ranks);
    const absl::Status status = RunSweep(target, run, stdout);
    if (!status.ok()) {
      std::fflush(stdout);
      AbortAllRanks(status);
    }
    runs.push_back(std::move(run));
  }

  return FinishRun(rank, options, command_line, machine, limits, runs);
}

}  // namespace
}  // namespace chorus::bench

int main(int argc, char** argv) {
  return chorus::bench::RunTool("mpi_bench", chorus::bench::Main, argc, argv);
}
