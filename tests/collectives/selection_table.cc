// Prints which algorithm the cost model picks, per collective with a choice, per rank count,
// as size ranges, with a device kind's default constants (collectives/select/selector.cc).
// docs/collectives.md quotes its output, so the "when is each picked" table is the model's, not a
// hand summary.
//
//   bazel run //tests/collectives:selection_table -- tcp
//   bazel run //tests/collectives:selection_table -- shm-oversubscribed   (more ranks than cores)
//   bazel run //tests/collectives:selection_table -- hybrid   (hosts of several ranks: TCP
//                                                              between hosts, shm within)
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chorus/collectives/select/selector.h"
#include "chorus/core/types.h"
#include "chorus/transport/inproc/inproc_device.h"
#include "chorus/transport/shm/shm_device.h"
#include "chorus/transport/tcp/tcp_device.h"

namespace chorus {
namespace {

// Powers of two from 4 B to 1 GiB, the sizes the table is sampled at.
constexpr int kMinLog2 = 2;
constexpr int kMaxLog2 = 30;

std::string SizeName(int log2) {
  static const char* const kUnits[] = {"B", "K", "M", "G"};
  return absl::StrCat(size_t{1} << (log2 % 10), kUnits[log2 / 10]);
}

// The algorithm the selector picks for a `bytes`-byte collective (as CollectiveArgs::bytes()
// counts it) of `kind` over `ranks` ranks.
std::string Pick(const Selector& selector, CollectiveKind kind, int ranks, int log2) {
  CollectiveArgs args;
  args.kind = kind;
  args.type = DataType::kUint8;
  const size_t bytes = size_t{1} << log2;
  const bool per_rank_block =
      kind == CollectiveKind::kAllGather || kind == CollectiveKind::kReduceScatter;
  args.count = per_rank_block ? bytes / ranks : bytes;
  absl::StatusOr<const AlgorithmEntry*> entry = selector.Choose(args, ranks, "");
  return entry.ok() ? std::string(AlgorithmName((*entry)->id)) : entry.status().ToString();
}

// The ranges of sizes over which `selector` picks each algorithm, "ring 4B-1M, ...".
std::string Ranges(const Selector& selector, CollectiveKind kind, int ranks) {
  std::string ranges;
  int start = kMinLog2;
  std::string current = Pick(selector, kind, ranks, start);
  for (int log2 = kMinLog2 + 1; log2 <= kMaxLog2 + 1; ++log2) {
    const std::string next = log2 <= kMaxLog2 ? Pick(selector, kind, ranks, log2) : "";
    if (next == current) continue;
    absl::StrAppend(&ranges, ranges.empty() ? "" : ", ", current, " ", SizeName(start),
                    log2 <= kMaxLog2 ? absl::StrCat("-", SizeName(log2 - 1)) : "+");
    start = log2;
    current = next;
  }
  return ranges;
}

constexpr CollectiveKind kKinds[] = {CollectiveKind::kAllReduce, CollectiveKind::kBroadcast,
                                     CollectiveKind::kReduce, CollectiveKind::kAllGather,
                                     CollectiveKind::kReduceScatter};

// Hosts of equal rank counts, TCP between them and shared memory within (the communicator's
// costs over the hybrid transport).
int RunHybrid() {
  std::printf(
      "hybrid: tcp between hosts, shm within; the cost model's pick by size (4 B - 1 GiB)\n\n");
  std::printf("| collective | hosts x ranks | picks |\n|---|---|---|\n");
  for (CollectiveKind kind : kKinds) {
    for (auto [hosts, per_host] :
         {std::pair{2, 2}, std::pair{2, 4}, std::pair{4, 2}, std::pair{4, 4}, std::pair{8, 8}}) {
      const int ranks = hosts * per_host;
      std::vector<int> labels;
      for (int r = 0; r < ranks; ++r) labels.push_back(r / per_host);
      const Selector selector({}, LinkCost(tcp::kTcpLink), PipelineSegmentsFor(tcp::kTcpLink),
                              *Topology::FromLabels(labels, ranks), LinkCost(shm::kShmLink));
      std::printf("| %s | %d x %d | %s |\n", std::string(CollectiveKindName(kind)).c_str(), hosts,
                  per_host, Ranges(selector, kind, ranks).c_str());
    }
  }
  return 0;
}

int Run(const std::string& device_kind) {
  if (device_kind == "hybrid") return RunHybrid();
  const bool oversubscribed = device_kind == "shm-oversubscribed";
  const LinkProfile link = device_kind == "shm" || oversubscribed ? shm::kShmLink
                           : device_kind == "inproc"              ? InprocDevice::kInprocLink
                                                                  : tcp::kTcpLink;
  const Selector selector({}, LinkCost(link), PipelineSegmentsFor(link), {}, {}, false,
                          /*cores_shared=*/oversubscribed);
  std::printf("device %s: the cost model's pick by size (4 B - 1 GiB, powers of two)\n\n",
              device_kind.c_str());
  std::printf("| collective | ranks | picks |\n|---|---|---|\n");
  for (CollectiveKind kind : kKinds) {
    for (int ranks : {2, 3, 4, 8, 16, 64}) {
      std::printf("| %s | %d | %s |\n", std::string(CollectiveKindName(kind)).c_str(), ranks,
                  Ranges(selector, kind, ranks).c_str());
    }
  }
  return 0;
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) { return chorus::Run(argc > 1 ? argv[1] : "tcp"); }
