// The sweep and the exact verification, driven against a reference implementation of every
// collective: R threads sharing memory, each computing its output naively from every rank's
// input. A correct reference must verify with zero wrong elements for every collective, type
// and op; deliberately broken ones must not.
#include "chorus/benchmarks/sweep.h"

#include <catch2/catch.hpp>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "chorus/benchmarks/verify.h"
#include "chorus/core/half.h"
#include "chorus/core/status.h"

namespace chorus::bench {
namespace {

// A reusable barrier for the rank threads. Thread-safe. (std::mutex rather than absl::Mutex:
// the system Abseil is not instrumented, so ThreadSanitizer would not see its ordering.)
class Rendezvous {
 public:
  explicit Rendezvous(int ranks) : ranks_(ranks) {}
  void Arrive() {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t generation = generation_;
    if (++arrived_ == ranks_) {
      arrived_ = 0;
      ++generation_;
      all_arrived_.notify_all();
      return;
    }
    all_arrived_.wait(lock, [&] { return generation_ != generation; });
  }

 private:
  std::mutex mu_;
  std::condition_variable all_arrived_;
  const int ranks_;
  int arrived_ = 0;
  int64_t generation_ = 0;
};

// How the reference misbehaves, to prove that verification catches it.
enum class Fault { kNone, kDropRankOne, kSkipOutput, kShiftChunks };

struct Shared {
  explicit Shared(int ranks) : rendezvous(ranks), inputs(ranks), values(ranks), integers(ranks) {}
  Rendezvous rendezvous;
  std::vector<const void*> inputs;
  std::vector<double> values;
  std::vector<int64_t> integers;
};

template <typename T>
void Store(void* data, int64_t index, double value) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    static_cast<T*>(data)[index] = T(static_cast<float>(value));
  } else {
    static_cast<T*>(data)[index] = static_cast<T>(value);
  }
}

class ReferenceTarget : public CollectiveTarget {
 public:
  ReferenceTarget(Shared& shared, const BenchmarkOptions& options, int rank, int ranks, Fault fault,
                  bool out_of_place)
      : shared_(shared),
        options_(options),
        rank_(rank),
        ranks_(ranks),
        fault_(fault),
        out_of_place_(out_of_place) {}

  int rank() const override { return rank_; }
  int ranks() const override { return ranks_; }
  bool SupportsOutOfPlace() const override { return out_of_place_; }

  absl::Status Bind(void* input, void* output, int64_t count) override {
    input_ = input;
    output_ = output;
    count_ = count;
    ++binds_;
    return absl::OkStatus();
  }

  absl::Status Run() override {
    ++runs_;
    if (options_.collective == CollectiveKind::kBarrier) {
      shared_.rendezvous.Arrive();
      return absl::OkStatus();
    }
    const BufferElements elements = BufferElementsFor(options_.collective, count_, ranks_);
    std::vector<double> result(elements.recv);
    shared_.inputs[rank_] = input_;
    shared_.rendezvous.Arrive();  // every input is ready
    for (size_t i = 0; i < elements.recv; ++i) result[i] = Compute(i);
    shared_.rendezvous.Arrive();  // nobody reads inputs any more; in-place may overwrite
    if (fault_ != Fault::kSkipOutput) {
      for (size_t i = 0; i < elements.recv; ++i) StoreOutput(i, result[i]);
    }
    shared_.rendezvous.Arrive();
    return absl::OkStatus();
  }

  absl::StatusOr<double> MaxOverRanks(double value) override {
    shared_.values[rank_] = value;
    shared_.rendezvous.Arrive();
    double max = 0;
    for (double v : shared_.values) max = std::max(max, v);
    shared_.rendezvous.Arrive();
    return max;
  }

  absl::StatusOr<int64_t> SumOverRanks(int64_t value) override {
    shared_.integers[rank_] = value;
    shared_.rendezvous.Arrive();
    int64_t sum = 0;
    for (int64_t v : shared_.integers) sum += v;
    shared_.rendezvous.Arrive();
    return sum;
  }

  absl::Status Barrier() override {
    shared_.rendezvous.Arrive();
    return absl::OkStatus();
  }

  int binds() const { return binds_; }
  int runs() const { return runs_; }

 private:
  double LoadInput(int rank, int64_t index) const {
    const void* data = shared_.inputs[rank];
    switch (options_.type) {
      case DataType::kInt8:
        return static_cast<const int8_t*>(data)[index];
      case DataType::kUint8:
        return static_cast<const uint8_t*>(data)[index];
      case DataType::kInt16:
        return static_cast<const int16_t*>(data)[index];
      case DataType::kUint16:
        return static_cast<const uint16_t*>(data)[index];
      case DataType::kInt32:
        return static_cast<const int32_t*>(data)[index];
      case DataType::kUint32:
        return static_cast<const uint32_t*>(data)[index];
      case DataType::kInt64:
        return static_cast<double>(static_cast<const int64_t*>(data)[index]);
      case DataType::kUint64:
        return static_cast<double>(static_cast<const uint64_t*>(data)[index]);
      case DataType::kFloat16:
        return static_cast<float>(static_cast<const Float16*>(data)[index]);
      case DataType::kBFloat16:
        return static_cast<float>(static_cast<const BFloat16*>(data)[index]);
      case DataType::kFloat32:
        return static_cast<const float*>(data)[index];
      case DataType::kFloat64:
        return static_cast<const double*>(data)[index];
    }
    return 0;
  }

  void StoreOutput(int64_t index, double value) {
    switch (options_.type) {
      case DataType::kInt8:
        return Store<int8_t>(output_, index, value);
      case DataType::kUint8:
        return Store<uint8_t>(output_, index, value);
      case DataType::kInt16:
        return Store<int16_t>(output_, index, value);
      case DataType::kUint16:
        return Store<uint16_t>(output_, index, value);
      case DataType::kInt32:
        return Store<int32_t>(output_, index, value);
      case DataType::kUint32:
        return Store<uint32_t>(output_, index, value);
      case DataType::kInt64:
        return Store<int64_t>(output_, index, value);
      case DataType::kUint64:
        return Store<uint64_t>(output_, index, value);
      case DataType::kFloat16:
        return Store<Float16>(output_, index, value);
      case DataType::kBFloat16:
        return Store<BFloat16>(output_, index, value);
      case DataType::kFloat32:
        return Store<float>(output_, index, value);
      case DataType::kFloat64:
        return Store<double>(output_, index, value);
    }
  }

  double Reduce(int64_t index) const {
    double result = 0;
    bool first = true;
    for (int r = 0; r < ranks_; ++r) {
      if (fault_ == Fault::kDropRankOne && r == 1) continue;
      const double v = LoadInput(r, index);
      if (first) {
        result = v;
        first = false;
        continue;
      }
      switch (options_.op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          result += v;
          break;
        case ReduceOp::kProd:
          result *= v;
          break;
        case ReduceOp::kMin:
          result = std::min(result, v);
          break;
        case ReduceOp::kMax:
          result = std::max(result, v);
          break;
      }
    }
    if (options_.op == ReduceOp::kAvg) result = std::trunc(result / ranks_);
    return result;
  }

  double Compute(int64_t index) const {
    const int64_t chunk = count_ / ranks_;
    // kShiftChunks reads every chunk one element late: right values, wrong place.
    const int64_t shifted = fault_ == Fault::kShiftChunks ? (index + 1) % count_ : index;
    switch (options_.collective) {
      case CollectiveKind::kAllReduce:
      case CollectiveKind::kReduce:
        return Reduce(shifted);
      case CollectiveKind::kReduceScatter:
        return Reduce(rank_ * chunk + shifted % chunk);
      case CollectiveKind::kBroadcast:
        return LoadInput(options_.root, shifted);
      case CollectiveKind::kAllGather:
        return LoadInput(static_cast<int>(index / chunk), shifted % chunk);
      case CollectiveKind::kAllToAll:
        return LoadInput(static_cast<int>(index / chunk), rank_ * chunk + shifted % chunk);
      default:
        return 0;
    }
  }

  Shared& shared_;
  const BenchmarkOptions& options_;
  const int rank_;
  const int ranks_;
  const Fault fault_;
  const bool out_of_place_;
  void* input_ = nullptr;
  void* output_ = nullptr;
  int64_t count_ = 0;
  int binds_ = 0;
  int runs_ = 0;
};

// Runs body(rank) on `ranks` threads and returns their statuses; aborts the test if they have
// not all finished within a minute (a hang is a failure). Written with std::thread and
// std::mutex instead of testing::RunRanksAsThreads because the system Abseil's Mutex is not
// instrumented, so ThreadSanitizer reports the harness's own bookkeeping as a race.
std::vector<absl::Status> RunThreads(int ranks, const std::function<absl::Status(int)>& body) {
  std::vector<absl::Status> statuses(ranks);
  std::mutex mu;
  std::condition_variable done;
  int finished = 0;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      absl::Status status = body(rank);
      std::lock_guard<std::mutex> lock(mu);
      statuses[rank] = std::move(status);
      ++finished;
      done.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    if (!done.wait_for(lock, std::chrono::seconds(60), [&] { return finished == ranks; })) {
      std::fprintf(stderr, "sweep_test: rank threads still running after 60 s; aborting\n");
      std::abort();
    }
  }
  for (std::thread& thread : threads) thread.join();
  return statuses;
}

struct SweepResult {
  std::vector<RunReport> runs;  // one per rank
  std::vector<int> binds;
  std::vector<int> runs_count;
};

SweepResult Sweep(const BenchmarkOptions& options, int ranks, Fault fault = Fault::kNone,
                  bool out_of_place = true) {
  Shared shared(ranks);
  SweepResult result;
  result.runs.resize(ranks);
  result.binds.resize(ranks);
  result.runs_count.resize(ranks);
  std::FILE* sink = std::tmpfile();
  const std::vector<absl::Status> statuses = RunThreads(ranks, [&](int rank) {
    ReferenceTarget target(shared, options, rank, ranks, fault, out_of_place);
    RunReport& run = result.runs[rank];
    run.library = "reference";
    run.ranks = ranks;
    run.options = options;
    absl::Status status = RunSweep(target, run, sink);
    result.binds[rank] = target.binds();
    result.runs_count[rank] = target.runs();
    return status;
  });
  std::fclose(sink);
  for (const absl::Status& status : statuses) REQUIRE(status.ok());
  return result;
}

BenchmarkOptions SmallSweep(CollectiveKind collective, DataType type, ReduceOp op) {
  BenchmarkOptions options;
  options.collective = collective;
  options.type = type;
  options.op = op;
  options.root = 1;
  options.min_bytes = 8;
  options.max_bytes = 2048;
  options.step_factor = 4;
  options.iterations = 2;
  options.warmup_iterations = 1;
  options.check_iterations = 2;
  return options;
}

TEST_CASE("a correct implementation verifies exactly for every collective, type and op") {
  const DataType types[] = {DataType::kInt8,     DataType::kUint8,   DataType::kInt16,
                            DataType::kUint16,   DataType::kInt32,   DataType::kUint32,
                            DataType::kInt64,    DataType::kUint64,  DataType::kFloat16,
                            DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                          ReduceOp::kAvg};
  for (const CollectiveKind collective :
       {CollectiveKind::kAllReduce, CollectiveKind::kReduce, CollectiveKind::kReduceScatter,
        CollectiveKind::kBroadcast, CollectiveKind::kAllGather, CollectiveKind::kAllToAll}) {
    for (const DataType type : types) {
      for (const ReduceOp op : ops) {
        if (!IsReduction(collective) && op != ReduceOp::kSum) continue;
        for (const int ranks : {3, 4}) {
          INFO(CollectiveKindName(collective)
               << " " << DataTypeName(type) << " " << ReduceOpName(op) << " ranks " << ranks);
          const SweepResult result = Sweep(SmallSweep(collective, type, op), ranks);
          const RunReport& run = result.runs[0];
          REQUIRE(!run.rows.empty());
          for (const ResultRow& row : run.rows) {
            REQUIRE(row.out_of_place);
            REQUIRE(row.in_place);
            CHECK(row.out_of_place->wrong == 0);
            CHECK(row.in_place->wrong == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("faults in an implementation show up as wrong elements") {
  for (const Fault fault : {Fault::kDropRankOne, Fault::kSkipOutput, Fault::kShiftChunks}) {
    for (const CollectiveKind collective :
         {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kAllGather,
          CollectiveKind::kAllToAll, CollectiveKind::kBroadcast}) {
      if (fault == Fault::kDropRankOne && !IsReduction(collective)) continue;
      for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kAvg}) {
        if (!IsReduction(collective) && op != ReduceOp::kSum) continue;
        INFO(CollectiveKindName(collective)
             << " " << ReduceOpName(op) << " fault " << static_cast<int>(fault));
        const SweepResult result = Sweep(SmallSweep(collective, DataType::kFloat32, op), 4, fault);
        const RunReport& run = result.runs[0];
        // Out-of-place always sees the fault; every rank's count is summed into rank 0's row.
        CHECK(run.rows.back().out_of_place->wrong > 0);
        CHECK(TotalWrong(run.rows) > 0);
      }
    }
  }
}

TEST_CASE("the sweep binds once per size and mode and runs check + warm-up + timed iterations") {
  BenchmarkOptions options =
      SmallSweep(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum);
  const SweepResult result = Sweep(options, 2);
  const size_t sizes = SweepSizes(options, 2).size();
  CHECK(result.runs[0].rows.size() == sizes);
  for (int rank = 0; rank < 2; ++rank) {
    CHECK(result.binds[rank] == static_cast<int>(2 * sizes));
    CHECK(result.runs_count[rank] ==
          static_cast<int>(
              2 * sizes *
              (options.check_iterations + options.warmup_iterations + options.iterations)));
  }
  const ResultRow& row = result.runs[0].rows.back();
  CHECK(row.bytes == 2048);
  CHECK(row.count == 512);
  CHECK(row.in_place->time_us > 0);
  CHECK(row.in_place->algbw_gbps > 0);
  CHECK(row.in_place->busbw_gbps == Approx(row.in_place->algbw_gbps));  // 2(n-1)/n = 1 at n=2
}

TEST_CASE("--settle_ms runs the first size first, the same calls on every rank") {
  BenchmarkOptions options =
      SmallSweep(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum);
  options.settle_ms = 20;
  const SweepResult result = Sweep(options, 3);
  const int sizes = static_cast<int>(SweepSizes(options, 3).size());
  const int swept =
      2 * sizes * (options.check_iterations + options.warmup_iterations + options.iterations);
  CHECK(result.runs[0].rows.size() == static_cast<size_t>(sizes));
  const int settling = result.runs_count[0] - swept;
  INFO("calls while settling: " << settling);
  CHECK(settling >= 64);
  CHECK(settling % 64 == 0);  // whole batches
  for (int rank = 0; rank < 3; ++rank) {
    CHECK(result.binds[rank] == 2 * sizes + 1);  // the settling binds once more
    CHECK(result.runs_count[rank] == result.runs_count[0]);
  }
  CHECK(TotalWrong(result.runs[0].rows) == 0);
}

TEST_CASE("a library without out-of-place is measured in place only; -c 0 leaves #wrong unset") {
  BenchmarkOptions options =
      SmallSweep(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum);
  options.check_iterations = 0;
  const SweepResult result = Sweep(options, 2, Fault::kSkipOutput, /*out_of_place=*/false);
  for (const ResultRow& row : result.runs[0].rows) {
    CHECK(!row.out_of_place);
    REQUIRE(row.in_place);
    CHECK(row.in_place->wrong == -1);
  }
}

TEST_CASE("barrier is one row of size 0, timed in place") {
  BenchmarkOptions options =
      SmallSweep(CollectiveKind::kBarrier, DataType::kFloat32, ReduceOp::kSum);
  const SweepResult result = Sweep(options, 3);
  REQUIRE(result.runs[0].rows.size() == 1);
  const ResultRow& row = result.runs[0].rows[0];
  CHECK(row.bytes == 0);
  CHECK(!row.out_of_place);
  REQUIRE(row.in_place);
  CHECK(row.in_place->time_us > 0);
  CHECK(row.in_place->wrong == -1);
}

TEST_CASE("a root outside the job is refused before anything runs") {
  BenchmarkOptions options =
      SmallSweep(CollectiveKind::kBroadcast, DataType::kFloat32, ReduceOp::kSum);
  options.root = 5;
  Shared shared(1);
  ReferenceTarget target(shared, options, 0, 1, Fault::kNone, true);
  RunReport run;
  run.options = options;
  std::FILE* sink = std::tmpfile();
  CHECK(GetErrorKind(RunSweep(target, run, sink)) == ErrorKind::kInvalidArgument);
  std::fclose(sink);
  CHECK(target.runs() == 0);
}

}  // namespace
}  // namespace chorus::bench
