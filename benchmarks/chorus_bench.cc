// chorus-bench: the nccl-tests-style sweep (benchmarks/sweep.h) run on a Chorus communicator,
// one sweep per --algo entry. Start it with chorusrun:
//
//   chorusrun -n 4 bazel-bin/benchmarks/chorus_bench -b 8 -e 64M --algo ring,auto
//
// `auto` leaves the choice to the communicator's selector (CHORUS_ALGO rules, then the cost
// model); each row then names the algorithm the selector picked for that size. Both the
// out-of-place and the in-place columns are measured. The rank's identity comes from
// rank_env.h; the store from --store (default $CHORUS_STORE).
#include <errno.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chorus/benchmarks/machine_limits.h"
#include "chorus/benchmarks/report.h"
#include "chorus/benchmarks/sweep.h"
#include "chorus/collectives/communicator.h"
#include "chorus/collectives/shape.h"
#include "chorus/core/env.h"
#include "chorus/core/status.h"
#include "chorus/cuda/gpu_runtime.h"
#include "chorus/rendezvous/rank_env.h"
#include "chorus/rendezvous/store_url.h"
#include "chorus/transport/device_from_env.h"
#include "chorus/transport/shm/shm_device.h"
#include "chorus/transport/tcp/tcp_options.h"

namespace chorus::bench {
namespace {

constexpr char kAutoAlgorithm[] = "auto";

const std::vector<ToolFlag>& ChorusFlags() {
  static const auto* flags = new std::vector<ToolFlag>{
      {"transport", "",
       "transport between the ranks: tcp, shm (shared memory, one host), ibverbs (InfiniBand "
       "or RoCE) or auto (shared memory within a host, verbs or tcp between hosts); default "
       "$CHORUS_TRANSPORT, else tcp"},
      {"store", "", "rendezvous store URL (file:///dir or redis://...); default $CHORUS_STORE"},
      {"buffers", "heap",
       "where the buffers live: heap, shared (AllocateSharedMemory: the shm transport reads "
       "large messages from them in place, as registered buffers), or cuda (device memory of "
       "GPU local_rank % GPUs; a --config=cuda build, docs/cuda.md)"},
      {"cpu", "",
       "once the communicator is created, run the collectives on this CPU only: ranks given "
       "the same one share a core that the library believes each has to itself, as when the "
       "scheduler places them so; default: wherever the scheduler likes"},
  };
  return *flags;
}

// The CPU of --cpu, if given: one this process may run on.
absl::StatusOr<std::optional<int>> ParseCpu(const std::string& text) {
  if (text.empty()) return std::optional<int>();
  int cpu = -1;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (!absl::SimpleAtoi(text, &cpu) || cpu < 0 || cpu >= CPU_SETSIZE ||
      sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || !CPU_ISSET(cpu, &allowed)) {
    return InvalidArgumentError(absl::StrCat("chorus_bench --cpu: '", text,
                                             "' is not a CPU this process may run on (see "
                                             "taskset -p ",
                                             getpid(), ")"));
  }
  return std::optional<int>(cpu);
}

// Binds the calling thread, which runs the collectives, to `cpu`.
absl::Status RunOnCpu(int cpu) {
  cpu_set_t only;
  CPU_ZERO(&only);
  CPU_SET(cpu, &only);
  if (sched_setaffinity(0, sizeof(only), &only) != 0) {
    return InternalError(absl::StrCat("chorus_bench --cpu ", cpu,
                                      ": sched_setaffinity failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status CheckTransport(const std::string& transport) {
  const absl::Status status = CheckTransportName(transport);
  return status.ok() ? status : Annotate(status, "chorus_bench --transport");
}

absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const std::string& transport,
                                                     const RankIdentity& identity) {
  CHORUS_ASSIGN_OR_RETURN(tcp::TcpDeviceOptions options, tcp::TcpDeviceOptions::FromEnv());
  // When the launcher says every rank is on this host (chorusrun -n, torchrun on one node),
  // listen on loopback unless the user chose an address or interface (CHORUS_TCP_ADDR /
  // CHORUS_TCP_IFNAME); across hosts, the usual interface choice.
  const bool one_host = identity.local_size == identity.size;
  if (one_host && options.address.empty() && options.interfaces.empty()) {
    options.address = "127.0.0.1";
  }
  return CreateDeviceByName(transport, options);
}

// The algorithm names of one sweep: --algo as given ("all" expands to every algorithm of the
// collective), or `auto` when none was given. Unknown names are refused with the alternatives.
absl::StatusOr<std::vector<std::string>> SelectedAlgorithms(const BenchmarkOptions& options) {
  const std::vector<std::string> known = Communicator::Algorithms(options.collective);
  if (options.algorithms.empty()) return std::vector<std::string>{kAutoAlgorithm};
  std::vector<std::string> selected;
  for (const std::string& algorithm : options.algorithms) {
    if (algorithm == "all") {
      selected.insert(selected.end(), known.begin(), known.end());
    } else if (algorithm == kAutoAlgorithm ||
               std::find(known.begin(), known.end(), algorithm) != known.end()) {
      selected.push_back(algorithm);
    } else {
      return InvalidArgumentError(
          absl::StrCat("Chorus has no ", CollectiveKindName(options.collective), " algorithm '",
                       algorithm, "'; choose from ", absl::StrJoin(known, ", "), ", auto or all"));
    }
  }
  return selected;
}

class ChorusTarget : public CollectiveTarget {
 public:
  // `algorithm` is a name from Communicator::Algorithms or "auto" (the selector's choice).
  // `gpu` is null unless --buffers cuda; then the buffers are memory of GPU `device`.
  ChorusTarget(Communicator& comm, const BenchmarkOptions& options, std::string algorithm,
               GpuRuntime* gpu, int device)
      : comm_(comm), options_(options), gpu_(gpu), device_(device) {
    if (algorithm != kAutoAlgorithm) call_options_.algorithm = std::move(algorithm);
    if (gpu_ != nullptr) call_options_.memory = MemoryPlacement::kCuda;
  }

  int rank() const override { return comm_.rank(); }
  int ranks() const override { return comm_.size(); }
  bool SupportsOutOfPlace() const override { return true; }

  absl::Status Bind(void* input, void* output, int64_t count) override {
    input_ = input;
    output_ = output;
    // The sweep counts the full array; Chorus counts one rank's block for the collectives that
    // split it.
    count_ = ArgsForArray(options_.collective, static_cast<size_t>(count), comm_.size()).count;
    if (call_options_.algorithm.empty() && options_.collective != CollectiveKind::kBarrier) {
      const size_t bytes = static_cast<size_t>(count) * DataTypeSize(options_.type);
      CHORUS_ASSIGN_OR_RETURN(std::string chosen,
                              comm_.ChooseAlgorithm(options_.collective, bytes));
      chosen_.insert(std::move(chosen));
    }
    return absl::OkStatus();
  }

  absl::Status Run() override {
    const DataType type = options_.type;
    switch (options_.collective) {
      case CollectiveKind::kAllReduce:
        return comm_.AllReduce(input_, output_, count_, type, options_.op, call_options_);
      case CollectiveKind::kBroadcast:
        return comm_.Broadcast(input_, output_, count_, type, options_.root, call_options_);
      case CollectiveKind::kReduce:
        return comm_.Reduce(input_, output_, count_, type, options_.op, options_.root,
                            call_options_);
      case CollectiveKind::kAllGather:
        return comm_.AllGather(input_, output_, count_, type, call_options_);
      case CollectiveKind::kReduceScatter:
        return comm_.ReduceScatter(input_, output_, count_, type, options_.op, call_options_);
      case CollectiveKind::kAllToAll:
        return comm_.AllToAll(input_, output_, count_, type, call_options_);
      case CollectiveKind::kBarrier:
        return comm_.Barrier(call_options_);
      default:
        return InvalidArgumentError(absl::StrCat("chorus-bench does not measure ",
                                                 CollectiveKindName(options_.collective)));
    }
  }

  absl::StatusOr<double> MaxOverRanks(double value) override {
    CHORUS_RETURN_IF_ERROR(comm_.AllReduce(&value, &value, 1, DataType::kFloat64, ReduceOp::kMax));
    return value;
  }

  absl::StatusOr<int64_t> SumOverRanks(int64_t value) override {
    CHORUS_RETURN_IF_ERROR(comm_.AllReduce(&value, &value, 1, DataType::kInt64, ReduceOp::kSum));
    return value;
  }

  absl::Status Barrier() override { return comm_.Barrier(); }

  absl::StatusOr<std::shared_ptr<std::byte>> AllocateBuffer(size_t bytes) override {
    if (gpu_ != nullptr) {
      CHORUS_ASSIGN_OR_RETURN(void* data,
                              gpu_->AllocateDevice(device_, std::max<size_t>(bytes, 1)));
      // Zero-filled, like the heap buffers.
      const std::vector<std::byte> zeros(bytes);
      CHORUS_RETURN_IF_ERROR(gpu_->CopyAsync(data, zeros.data(), bytes, device_, nullptr));
      CHORUS_RETURN_IF_ERROR(gpu_->WaitStream(device_, nullptr, Deadline::Infinite()));
      GpuRuntime* gpu = gpu_;
      const int device = device_;
      return std::shared_ptr<std::byte>(static_cast<std::byte*>(data), [gpu, device](std::byte* p) {
        gpu->FreeDevice(device, p);
      });
    }
    if (options_.tool_flags.at("buffers") != "shared") {
      return CollectiveTarget::AllocateBuffer(bytes);
    }
    CHORUS_ASSIGN_OR_RETURN(void* data, shm::AllocateSharedMemory(bytes));
    std::memset(data, 0, bytes);  // touched once, like the heap buffers
    return std::shared_ptr<std::byte>(static_cast<std::byte*>(data),
                                      [](std::byte* p) { shm::FreeSharedMemory(p).IgnoreError(); });
  }

  GpuRuntime* DeviceMemory(int* device) override {
    *device = device_;
    return gpu_;
  }

  // For `auto`: the algorithms the selector picked over the sweep, e.g. "auto (ring)".
  std::string Description() const {
    if (!call_options_.algorithm.empty()) return call_options_.algorithm;
    if (chosen_.empty()) return kAutoAlgorithm;
    return absl::StrCat(kAutoAlgorithm, " (", absl::StrJoin(chosen_, ", "), ")");
  }

 private:
  Communicator& comm_;
  const BenchmarkOptions& options_;
  GpuRuntime* const gpu_;
  const int device_;
  CollectiveOptions call_options_;
  void* input_ = nullptr;
  void* output_ = nullptr;
  size_t count_ = 0;
  std::set<std::string> chosen_;
};

absl::Status Main(int argc, char** argv) {
  CHORUS_ASSIGN_OR_RETURN(const BenchmarkOptions options,
                          ParseBenchmarkFlags(argc, argv, ChorusFlags()));
  if (options.help) {
    std::fputs(BenchmarkUsage("chorus_bench", ChorusFlags()).c_str(), stdout);
    std::fputs("Run it under chorusrun (or set CHORUS_RANK, CHORUS_SIZE, CHORUS_STORE).\n", stdout);
    return absl::OkStatus();
  }
  const std::string& transport_flag = options.tool_flags.at("transport");
  const std::string transport =
      transport_flag.empty() ? TransportFromEnvironment("tcp") : transport_flag;
  const std::string& buffers = options.tool_flags.at("buffers");
  if (buffers != "heap" && buffers != "shared" && buffers != "cuda") {
    return InvalidArgumentError(
        absl::StrCat("chorus_bench --buffers: '", buffers, "' is not heap, shared or cuda"));
  }
  CHORUS_RETURN_IF_ERROR(CheckTransport(transport));  // before the slow probe
  CHORUS_ASSIGN_OR_RETURN(const std::optional<int> cpu, ParseCpu(options.tool_flags.at("cpu")));
  CHORUS_ASSIGN_OR_RETURN(const std::vector<std::string> algorithms, SelectedAlgorithms(options));
  CHORUS_ASSIGN_OR_RETURN(const RankIdentity identity, ReadRankIdentity());
  const std::string& store_flag = options.tool_flags.at("store");
  CHORUS_ASSIGN_OR_RETURN(const StoreUrl url, store_flag.empty() ? StoreUrlFromEnvironment()
                                                                 : ParseStoreUrl(store_flag));
  const std::vector<BenchmarkOptions> sweeps = SweepsByTypeAndOp(options);
  for (const BenchmarkOptions& sweep : sweeps) {
    CHORUS_RETURN_IF_ERROR(ValidateForRanks(sweep, identity.size));
  }

  // The probe forks, so it runs before the device starts its progress thread; the other ranks
  // wait for rank 0 in the rendezvous meanwhile.
  const MachineDescription machine = DescribeMachine();
  std::optional<MachineLimits> limits;
  if (identity.rank == 0 && options.probe_limits) {
    CHORUS_ASSIGN_OR_RETURN(limits, ProbeMachineLimits());
    std::fputs(FormatMachine(machine, *limits).c_str(), stdout);
    std::fflush(stdout);
  }

  CHORUS_ASSIGN_OR_RETURN(const std::unique_ptr<Store> store, OpenStore(url));
  CHORUS_ASSIGN_OR_RETURN(const std::unique_ptr<Device> device, CreateDevice(transport, identity));
  CommunicatorOptions comm_options;
  // The rank-0 probe takes a few seconds while the others wait in the rendezvous.
  comm_options.connect_timeout = absl::Seconds(120);
  CHORUS_ASSIGN_OR_RETURN(const std::unique_ptr<Communicator> comm,
                          Communicator::Create(*store, "chorus-bench", *device, identity.rank,
                                               identity.size, comm_options));
  // After the communicator has looked at the cores it may use (cores per rank set how its
  // waits poll).
  if (cpu) {
    CHORUS_RETURN_IF_ERROR(RunOnCpu(*cpu));
    if (identity.rank == 0) std::printf("# collectives run on CPU %d only (--cpu)\n", *cpu);
  }
  // After the probe's fork: CUDA must not be initialised in a process that forks.
  GpuRuntime* gpu = nullptr;
  int gpu_device = -1;
  if (buffers == "cuda") {
    gpu = InstalledGpuRuntime();
    if (gpu == nullptr) {
      return InvalidArgumentError(
          "chorus_bench --buffers cuda: this chorus_bench was built without CUDA support (build "
          "it with --config=cuda, docs/cuda.md)");
    }
    CHORUS_RETURN_IF_ERROR(Annotate(gpu->Available(), "chorus_bench --buffers cuda"));
    gpu_device = std::max(identity.local_rank, 0) % gpu->DeviceCount();
  }
  std::vector<RunReport> runs;
  for (const BenchmarkOptions& sweep : sweeps) {
    for (const std::string& algorithm : algorithms) {
      RunReport run;
      run.library = "chorus";
      run.library_version = "0.1";
      run.algorithm = algorithm;
      run.transport = gpu != nullptr ? transport + " (cuda buffers)" : transport;
      run.store = std::string(StoreKindName(url.kind));
      run.ranks = identity.size;
      run.options = sweep;
      ChorusTarget target(*comm, sweep, algorithm, gpu, gpu_device);
      CHORUS_RETURN_IF_ERROR(RunSweep(target, run, stdout));
      run.algorithm = target.Description();
      if (identity.rank == 0 && run.algorithm != algorithm) {
        std::printf("# %s picked: %s\n", algorithm.c_str(), run.algorithm.c_str());
      }
      runs.push_back(std::move(run));
    }
  }

  return FinishRun(identity.rank, options, CommandLine(argc, argv), machine, limits, runs);
}

}  // namespace
}  // namespace chorus::bench

int main(int argc, char** argv) {
  return chorus::bench::RunTool("chorus_bench", chorus::bench::Main, argc, argv);
}
