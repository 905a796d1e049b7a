#include "tests/reliability/soak_call.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "tests/collectives/cases.h"

namespace chorus::testing {
namespace {

constexpr CollectiveKind kKinds[] = {CollectiveKind::kAllReduce, CollectiveKind::kBroadcast,
                                     CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
                                     CollectiveKind::kAllToAll,  CollectiveKind::kBarrier};
constexpr DataType kTypes[] = {DataType::kInt32, DataType::kInt64, DataType::kFloat32,
                               DataType::kFloat64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};
constexpr size_t kLargeCounts[] = {1000, 16384, 65537};
constexpr size_t kMaxInFlight = 3;

struct SoakCall {
  CollectiveKind kind;
  DataType type;
  ReduceOp op;
  size_t count;  // per block
  int root;
  bool async;
};

uint64_t Mix(uint64_t x) {  // splitmix64: a different, reproducible draw per (stream, index)
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

SoakCall CallAt(int stream, int64_t index, int ranks) {
  uint64_t draw = Mix((static_cast<uint64_t>(stream) << 48) ^ static_cast<uint64_t>(index));
  auto take = [&draw](uint64_t n) {
    const uint64_t value = draw % n;
    draw /= n;
    return value;
  };
  SoakCall call;
  call.kind = kKinds[take(std::size(kKinds))];
  call.type = kTypes[take(std::size(kTypes))];
  call.op = kOps[take(std::size(kOps))];
  call.root = static_cast<int>(take(ranks));
  call.async = take(3) == 0;
  call.count = take(16) == 0 ? kLargeCounts[take(std::size(kLargeCounts))] : take(65);
  return call;
}

// Rank r's element j: small integers, exact in every type and in any sum of four ranks, and
// different per block so that a misplaced block is seen.
double Value(int rank, size_t j) { return (rank + 1) + 8.0 * static_cast<double>(j % 4099); }

double Combine(ReduceOp op, int ranks, size_t j) {
  double result = Value(0, j);
  for (int r = 1; r < ranks; ++r) {
    const double v = Value(r, j);
    result = op == ReduceOp::kSum   ? result + v
             : op == ReduceOp::kMax ? std::max(result, v)
                                    : std::min(result, v);
  }
  return result;
}

// One call's buffers, launched on construction, checked by Finish.
class Pending {
 public:
  Pending(Communicator& comm, const SoakCall& call) : comm_(comm), call_(call) {
    const int p = comm.size();
    const size_t n = call.kind == CollectiveKind::kBarrier ? 0 : call.count;  // no data
    const bool blocks_in =
        call.kind == CollectiveKind::kReduceScatter || call.kind == CollectiveKind::kAllToAll;
    const bool blocks_out =
        call.kind == CollectiveKind::kAllGather || call.kind == CollectiveKind::kAllToAll;
    const size_t elem = DataTypeSize(call.type);
    send_.resize((blocks_in ? p * n : n) * elem + 1);
    recv_.resize((blocks_out ? p * n : n) * elem + 1);
    for (size_t j = 0; j < (blocks_in ? p * n : n); ++j) {
      SetElement(call.type, send_.data(), j, Value(comm.rank(), j));
    }
    Launch();
  }

  absl::Status Finish() {
    CHORUS_RETURN_IF_ERROR(work_ != nullptr ? work_->Wait() : status_);
    const int p = comm_.size();
    const int me = comm_.rank();
    const size_t n = call_.count;
    for (size_t j = 0; j < (recv_.size() - 1) / DataTypeSize(call_.type); ++j) {
      const double expected = Expected(p, me, n, j);
      const double got = ElementValue(call_.type, recv_.data(), j);
      if (got != expected) {
        return InternalError(absl::StrCat(CollectiveKindName(call_.kind), " of ", n, " x ",
                                          DataTypeName(call_.type), " on rank ", me, ": element ",
                                          j, " is ", got, ", expected ", expected));
      }
    }
    return absl::OkStatus();
  }

 private:
  double Expected(int p, int me, size_t n, size_t j) const {
    switch (call_.kind) {
      case CollectiveKind::kAllReduce:
        return Combine(call_.op, p, j);
      case CollectiveKind::kBroadcast:
        return Value(call_.root, j);
      case CollectiveKind::kAllGather:
        return Value(static_cast<int>(j / n), j % n);
      case CollectiveKind::kReduceScatter:
        return Combine(call_.op, p, me * n + j);
      default:  // alltoall: block s of recv is block `me` of rank s's send
        return Value(static_cast<int>(j / n), me * n + j % n);
    }
  }

  void Launch() {
    const void* send = send_.data();
    void* recv = recv_.data();
    const size_t n = call_.count;
    const DataType t = call_.type;
    Communicator& c = comm_;
    switch (call_.kind) {
      case CollectiveKind::kAllReduce:
        Run([&] { return c.AllReduceAsync(send, recv, n, t, call_.op); },
            [&] { return c.AllReduce(send, recv, n, t, call_.op); });
        return;
      case CollectiveKind::kBroadcast:
        Run([&] { return c.BroadcastAsync(send, recv, n, t, call_.root); },
            [&] { return c.Broadcast(send, recv, n, t, call_.root); });
        return;
      case CollectiveKind::kAllGather:
        Run([&] { return c.AllGatherAsync(send, recv, n, t); },
            [&] { return c.AllGather(send, recv, n, t); });
        return;
      case CollectiveKind::kReduceScatter:
        Run([&] { return c.ReduceScatterAsync(send, recv, n, t, call_.op); },
            [&] { return c.ReduceScatter(send, recv, n, t, call_.op); });
        return;
      case CollectiveKind::kAllToAll:
        Run([&] { return c.AllToAllAsync(send, recv, n, t); },
            [&] { return c.AllToAll(send, recv, n, t); });
        return;
      default:
        Run([&] { return c.BarrierAsync(); }, [&] { return c.Barrier(); });
        return;
    }
  }

  template <typename AsyncCall, typename BlockingCall>
  void Run(const AsyncCall& async_call, const BlockingCall& blocking_call) {
    if (call_.async) {
      work_ = async_call();
    } else {
      status_ = blocking_call();
    }
  }

  Communicator& comm_;
  const SoakCall call_;
  // One spare byte each: a zero count must still give the collective non-null buffers.
  std::vector<uint8_t> send_;
  std::vector<uint8_t> recv_;
  WorkPtr work_;         // asynchronous calls
  absl::Status status_;  // blocking calls
};

absl::Status Drain(std::deque<std::unique_ptr<Pending>>& in_flight, size_t keep) {
  while (in_flight.size() > keep) {
    CHORUS_RETURN_IF_ERROR(in_flight.front()->Finish());
    in_flight.pop_front();
  }
  return absl::OkStatus();
}

absl::Status RunCalls(Communicator& comm, const std::vector<SoakCall>& calls) {
  std::deque<std::unique_ptr<Pending>> in_flight;
  for (const SoakCall& call : calls) {
    // A blocking call waits for the asynchronous ones before it: they run in call order.
    CHORUS_RETURN_IF_ERROR(Drain(in_flight, call.async ? kMaxInFlight - 1 : 0));
    in_flight.push_back(std::make_unique<Pending>(comm, call));
  }
  return Drain(in_flight, 0);
}

}  // namespace

absl::Status RunSoakRound(Communicator& comm, int stream, int64_t first, int n) {
  std::vector<SoakCall> calls;
  for (int64_t i = first; i < first + n; ++i) calls.push_back(CallAt(stream, i, comm.size()));
  return RunCalls(comm, calls);
}

absl::Status RunSoakWarmup(Communicator& comm, int stream) {
  std::vector<SoakCall> calls;
  for (CollectiveKind kind : kKinds) {
    for (DataType type : kTypes) {
      for (size_t count : kLargeCounts) {
        for (bool async : {false, true}) {
          calls.push_back({kind, type, ReduceOp::kSum, count, stream % comm.size(), async});
        }
      }
    }
  }
  return RunCalls(comm, calls);
}

}  // namespace chorus::testing
