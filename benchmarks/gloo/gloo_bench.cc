// gloo-bench: the nccl-tests-style sweep of chorus-bench, run with Gloo's own algorithms (the
// old-style classes AllreduceRing, AllreduceRingChunked, AllreduceHalvingDoubling,
// AllreduceBcube, BroadcastOneToAll, BarrierAllToAll over float), Gloo's TCP transport on
// 127.0.0.1 and Gloo's FileStore or RedisStore, so that Chorus is compared with Gloo on the same
// machine, ranks, sizes, table and JSON schema. Start it with chorusrun:
//
//   chorusrun -n 4 bazel-bin/benchmarks/gloo/gloo_bench -b 8 -e 64M --algo ring,bcube
//
// Gloo's old-style algorithms reduce in place, so out-of-place columns read N/A.
#include <cstdio>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chorus/benchmarks/machine_limits.h"
#include "chorus/benchmarks/report.h"
#include "chorus/benchmarks/sweep.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/rank_env.h"
#include "chorus/rendezvous/store_url.h"
#include "gloo/allreduce_bcube.h"
#include "gloo/allreduce_halving_doubling.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/barrier_all_to_all.h"
#include "gloo/broadcast_one_to_all.h"
#include "gloo/config.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/rendezvous/redis_store.h"
#include "gloo/transport/tcp/device.h"

namespace chorus::bench {
namespace {

const std::vector<ToolFlag>& GlooFlags() {
  static const auto* flags = new std::vector<ToolFlag>{
      {"timeout", "60", "Gloo context timeout in seconds (rendezvous and every collective)"},
  };
  return *flags;
}

// Gloo's algorithms for each collective; the first is the default.
std::vector<std::string> AlgorithmsOf(CollectiveKind collective) {
  switch (collective) {
    case CollectiveKind::kAllReduce:
      return {"ring", "ring_chunked", "halving_doubling", "bcube"};
    case CollectiveKind::kBroadcast:
      return {"one_to_all"};
    case CollectiveKind::kBarrier:
      return {"all_to_all"};
    default:
      return {};
  }
}

std::string GlooVersion() {
  return absl::StrCat(GLOO_VERSION_MAJOR, ".", GLOO_VERSION_MINOR, ".", GLOO_VERSION_PATCH);
}

absl::StatusOr<const gloo::ReductionFunction<float>*> GlooReduction(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return gloo::ReductionFunction<float>::sum;
    case ReduceOp::kProd:
      return gloo::ReductionFunction<float>::product;
    case ReduceOp::kMin:
      return gloo::ReductionFunction<float>::min;
    case ReduceOp::kMax:
      return gloo::ReductionFunction<float>::max;
    case ReduceOp::kAvg:
      break;
  }
  return InvalidArgumentError("Gloo has no avg reduction; use -o sum, prod, min or max");
}

// Runs `body`, turning Gloo's exceptions (timeouts, closed connections, enforce failures) into
// a status that says what was being done.
template <typename Body>
absl::Status CatchGloo(absl::string_view what, Body&& body) {
  try {
    body();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return PeerUnavailableError(absl::StrCat("gloo ", what, " failed: ", e.what()));
  }
}

// Single-element allreduce on Gloo itself, for the cross-rank max time and #wrong sum.
absl::StatusOr<double> AllreduceScalar(const std::shared_ptr<gloo::Context>& context,
                                       double value,
                                       const gloo::ReductionFunction<double>* fn) {
  absl::Status status = CatchGloo("scalar allreduce", [&] {
    gloo::AllreduceRing<double>(context, {&value}, 1, fn).run();
  });
  if (!status.ok()) return status;
  return value;
}

class GlooTarget : public CollectiveTarget {
 public:
  GlooTarget(std::shared_ptr<gloo::Context> context, const BenchmarkOptions& options,
             std::string algorithm, const gloo::ReductionFunction<float>* reduction)
      : context_(std::move(context)),
        options_(options),
        algorithm_(std::move(algorithm)),
        reduction_(reduction) {}

  int rank() const override { return context_->rank; }
  int ranks() const override { return context_->size; }
  bool SupportsOutOfPlace() const override { return false; }

  absl::Status Bind(void* input, void* output, int64_t count) override {
    if (input != output) return InternalError("gloo-bench binds in-place buffers only");
    if (count > std::numeric_limits<int>::max()) {
      return InvalidArgumentError("Gloo counts elements in an int; lower -e");
    }
    const std::vector<float*> buffers = {static_cast<float*>(output)};
    const int n = static_cast<int>(count);
    algorithm_object_.reset();  // release the previous size's buffers first
    return CatchGloo(absl::StrCat("setup of ", algorithm_), [&] {
      switch (options_.collective) {
        case CollectiveKind::kAllReduce:
          if (algorithm_ == "ring") {
            algorithm_object_ =
                std::make_unique<gloo::AllreduceRing<float>>(context_, buffers, n, reduction_);
          } else if (algorithm_ == "ring_chunked") {
            algorithm_object_ = std::make_unique<gloo::AllreduceRingChunked<float>>(
                context_, buffers, n, reduction_);
          } else if (algorithm_ == "halving_doubling") {
            algorithm_object_ = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(
                context_, buffers, n, reduction_);
          } else {
            algorithm_object_ =
                std::make_unique<gloo::AllreduceBcube<float>>(context_, buffers, n, reduction_);
          }
          break;
        case CollectiveKind::kBroadcast:
          algorithm_object_ = std::make_unique<gloo::BroadcastOneToAll<float>>(
              context_, buffers, n, options_.root);
          break;
        default:
          algorithm_object_ = std::make_unique<gloo::BarrierAllToAll>(context_);
          break;
      }
    });
  }

  absl::Status Run() override {
    return CatchGloo(algorithm_, [&] { algorithm_object_->run(); });
  }

  absl::StatusOr<double> MaxOverRanks(double value) override {
    return AllreduceScalar(context_, value, gloo::ReductionFunction<double>::max);
  }

  absl::StatusOr<int64_t> SumOverRanks(int64_t value) override {
    // Exact: the counts are far below 2^53.
    CHORUS_ASSIGN_OR_RETURN(
        const double sum, AllreduceScalar(context_, static_cast<double>(value),
                                          gloo::ReductionFunction<double>::sum));
    return static_cast<int64_t>(sum);
  }

  absl::Status Barrier() override {
    return CatchGloo("barrier", [&] { gloo::BarrierAllToAll(context_).run(); });
  }

 private:
  const std::shared_ptr<gloo::Context> context_;
  const BenchmarkOptions& options_;
  const std::string algorithm_;
  const gloo::ReductionFunction<float>* const reduction_;
  std::unique_ptr<gloo::Algorithm> algorithm_object_;
};

// What gloo-bench can measure; InvalidArgument naming the alternative otherwise.
absl::Status CheckSupported(const BenchmarkOptions& options) {
  const std::vector<std::string> known = AlgorithmsOf(options.collective);
  if (known.empty()) {
    return InvalidArgumentError(
        absl::StrCat("gloo-bench measures allreduce, broadcast and "
                     "barrier, not ",
                     CollectiveKindName(options.collective)));
  }
  for (DataType type : options.types) {
    if (type != DataType::kFloat32) {
      return InvalidArgumentError("gloo-bench measures float32 only (-d float32)");
    }
  }
  // Refused here, before connecting, so that every rank stops with the same message instead
  // of one rank's exit closing the connections another is still making.
  for (ReduceOp op : IsReduction(options.collective) ? options.ops : std::vector<ReduceOp>{}) {
    CHORUS_RETURN_IF_ERROR(GlooReduction(op).status());
  }
  for (const std::string& algorithm : options.algorithms) {
    if (algorithm != "all" && std::find(known.begin(), known.end(), algorithm) == known.end()) {
      return InvalidArgumentError(
          absl::StrCat("Gloo has no ", CollectiveKindName(options.collective), " algorithm '",
                       algorithm, "'; choose from ", absl::StrJoin(known, ", "), " or all"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> SelectedAlgorithms(const BenchmarkOptions& options) {
  const std::vector<std::string> known = AlgorithmsOf(options.collective);
  if (options.algorithms.empty()) return {known.front()};
  for (const std::string& algorithm : options.algorithms) {
    if (algorithm == "all") return known;
  }
  return options.algorithms;
}

// Gloo's own rendezvous store: kept for the whole run, since the ranks also leave through it.
struct Rendezvous {
  std::unique_ptr<gloo::rendezvous::Store> base;
  std::unique_ptr<gloo::rendezvous::PrefixStore> store;
};

absl::StatusOr<Rendezvous> OpenGlooStore(const StoreUrl& url) {
  Rendezvous rendezvous;
  absl::Status status = CatchGloo("store", [&] {
    if (url.kind == StoreUrl::Kind::kFile) {
      rendezvous.base = std::make_unique<gloo::rendezvous::FileStore>(url.file_directory);
    } else {
      rendezvous.base =
          std::make_unique<gloo::rendezvous::RedisStore>(url.redis.host, url.redis.port);
    }
    rendezvous.store = std::make_unique<gloo::rendezvous::PrefixStore>(
        url.prefix.empty() ? "gloo-bench" : url.prefix, *rendezvous.base);
  });
  if (!status.ok()) return status;
  return rendezvous;
}

// Connects this rank to the others through `store` and Gloo's TCP transport on 127.0.0.1.
absl::StatusOr<std::shared_ptr<gloo::Context>> Connect(const RankIdentity& identity,
                                                       gloo::rendezvous::Store& store,
                                                       int timeout_s) {
  std::shared_ptr<gloo::rendezvous::Context> context;
  absl::Status status = CatchGloo("rendezvous", [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    context = std::make_shared<gloo::rendezvous::Context>(identity.rank, identity.size);
    context->setTimeout(std::chrono::seconds(timeout_s));
    context->connectFullMesh(store, device);
  });
  if (!status.ok()) return status;
  return std::shared_ptr<gloo::Context>(context);
}

// Gloo's algorithms return before their last sends have left (AllreduceRing's final
// notification has no waitSend), and a process that exits closes its pairs: a peer still
// waiting for that message failed with "Connection closed by peer" in 4 of 20 runs of
// gloo_bench_test. A final Gloo barrier only moves the race into the barrier (14 of 20). So
// the ranks leave together through the store instead: each says it is done with Gloo and
// waits, with the run's timeout, until every rank has.
absl::Status LeaveTogether(gloo::rendezvous::Store& store, const RankIdentity& identity,
                           int timeout_s) {
  return CatchGloo("leaving together", [&] {
    std::vector<std::string> everyone;
    for (int rank = 0; rank < identity.size; ++rank) {
      everyone.push_back(absl::StrCat("done/", rank));
    }
    store.set(everyone[identity.rank], {'1'});
    store.wait(everyone, std::chrono::seconds(timeout_s));
  });
}

absl::Status Main(int argc, char** argv) {
  CHORUS_ASSIGN_OR_RETURN(const BenchmarkOptions options,
                          ParseBenchmarkFlags(argc, argv, GlooFlags()));
  if (options.help) {
    std::fputs(BenchmarkUsage("gloo_bench", GlooFlags()).c_str(), stdout);
    std::fputs("Run it under chorusrun (or set CHORUS_RANK, CHORUS_SIZE, CHORUS_STORE).\n",
               stdout);
    return absl::OkStatus();
  }
  CHORUS_RETURN_IF_ERROR(CheckSupported(options));
  int timeout_s = 0;
  if (!absl::SimpleAtoi(options.tool_flags.at("timeout"), &timeout_s) || timeout_s < 1) {
    return InvalidArgumentError("--timeout takes a whole number of seconds >= 1");
  }
  CHORUS_ASSIGN_OR_RETURN(const RankIdentity identity, ReadRankIdentity());
  CHORUS_ASSIGN_OR_RETURN(const StoreUrl url, StoreUrlFromEnvironment());
  if (url.kind == StoreUrl::Kind::kTcp) {
    return InvalidArgumentError("Gloo cannot use Chorus's tcp:// store; give it a file:// or "
                                "redis:// store");
  }
  if (url.kind == StoreUrl::Kind::kRedis &&
      (!url.redis.username.empty() || !url.redis.password.empty())) {
    return InvalidArgumentError("Gloo's RedisStore cannot authenticate; use a Redis without "
                                "a password or a file:// store");
  }
  CHORUS_RETURN_IF_ERROR(ValidateForRanks(options, identity.size));

  // The probe forks, so it runs before Gloo starts its I/O thread; the other ranks wait for
  // rank 0 in the rendezvous meanwhile.
  const MachineDescription machine = DescribeMachine();
  std::optional<MachineLimits> limits;
  if (identity.rank == 0 && options.probe_limits) {
    CHORUS_ASSIGN_OR_RETURN(limits, ProbeMachineLimits());
    std::fputs(FormatMachine(machine, *limits).c_str(), stdout);
    std::fflush(stdout);
  }

  CHORUS_ASSIGN_OR_RETURN(Rendezvous rendezvous, OpenGlooStore(url));
  CHORUS_ASSIGN_OR_RETURN(const auto context, Connect(identity, *rendezvous.store, timeout_s));
  std::vector<RunReport> runs;
  for (const BenchmarkOptions& sweep : SweepsByTypeAndOp(options)) {
    CHORUS_ASSIGN_OR_RETURN(const auto* reduction, IsReduction(sweep.collective)
                                                       ? GlooReduction(sweep.op)
                                                       : GlooReduction(ReduceOp::kSum));
    for (const std::string& algorithm : SelectedAlgorithms(sweep)) {
      RunReport run;
      run.library = "gloo";
      run.library_version = GlooVersion();
      run.algorithm = algorithm;
      run.transport = "tcp";
      run.store = std::string(StoreKindName(url.kind));
      run.ranks = identity.size;
      run.options = sweep;
      GlooTarget target(context, sweep, algorithm, reduction);
      CHORUS_RETURN_IF_ERROR(RunSweep(target, run, stdout));
      runs.push_back(std::move(run));
    }
  }

  CHORUS_RETURN_IF_ERROR(LeaveTogether(*rendezvous.store, identity, timeout_s));
  return FinishRun(identity.rank, options, CommandLine(argc, argv), machine, limits, runs);
}

}  // namespace
}  // namespace chorus::bench

int main(int argc, char** argv) {
  return chorus::bench::RunTool("gloo_bench", chorus::bench::Main, argc, argv);
}
