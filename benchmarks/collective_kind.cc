#include "chorus/benchmarks/collective_kind.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"

namespace chorus::bench {
namespace {

constexpr Collective kAll[] = {Collective::kAllreduce,     Collective::kBroadcast,
                               Collective::kReduce,        Collective::kAllgather,
                               Collective::kReduceScatter, Collective::kAlltoall,
                               Collective::kBarrier};

bool SplitsTheArray(Collective collective) {
  return collective == Collective::kAllgather || collective == Collective::kReduceScatter ||
         collective == Collective::kAlltoall;
}

}  // namespace

absl::string_view CollectiveName(Collective collective) {
  switch (collective) {
    case Collective::kAllreduce:
      return "allreduce";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kReduce:
      return "reduce";
    case Collective::kAllgather:
      return "allgather";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kAlltoall:
      return "alltoall";
    case Collective::kBarrier:
      return "barrier";
  }
  return "unknown";
}

absl::StatusOr<Collective> ParseCollective(absl::string_view name) {
  std::string names;
  for (Collective collective : kAll) {
    if (name == CollectiveName(collective)) return collective;
    absl::StrAppend(&names, names.empty() ? "" : ", ", CollectiveName(collective));
  }
  return InvalidArgumentError(
      absl::StrCat("unknown collective '", name, "'; expected one of ", names));
}

double BusBandwidthFactor(Collective collective, int ranks) {
  const double n = ranks;
  switch (collective) {
    case Collective::kAllreduce:
      return 2 * (n - 1) / n;
    case Collective::kAllgather:
    case Collective::kReduceScatter:
    case Collective::kAlltoall:
      return (n - 1) / n;
    case Collective::kBroadcast:
    case Collective::kReduce:
      return 1;
    case Collective::kBarrier:
      return 0;
  }
  return 0;
}

bool HasReduceOp(Collective collective) {
  return collective == Collective::kAllreduce || collective == Collective::kReduce ||
         collective == Collective::kReduceScatter;
}

bool HasRoot(Collective collective) {
  return collective == Collective::kBroadcast || collective == Collective::kReduce;
}

BufferElements BufferElementsFor(Collective collective, int64_t count, int ranks) {
  switch (collective) {
    case Collective::kAllgather:
      return {count / ranks, count};
    case Collective::kReduceScatter:
      return {count, count / ranks};
    case Collective::kBarrier:
      return {0, 0};
    default:
      return {count, count};
  }
}

int64_t CountGranularity(Collective collective, int ranks) {
  return SplitsTheArray(collective) ? ranks : 1;
}

}  // namespace chorus::bench
