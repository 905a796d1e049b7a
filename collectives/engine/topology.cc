#include "chorus/collectives/engine/topology.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chorus/core/status.h"

namespace chorus {

Topology Topology::Flat(int size) { return *FromLabels(std::vector<int>(size, 0), size); }

absl::StatusOr<Topology> Topology::FromLabels(const std::vector<int>& labels, int size) {
  if (static_cast<int>(labels.size()) != size) {
    return InvalidArgumentError(
        absl::StrCat("host_of_rank has ", labels.size(), " entries for a communicator of ", size));
  }
  Topology topology;
  std::map<int, int> number;  // label -> host number, in order of first (lowest) rank
  for (int rank = 0; rank < size; ++rank) {
    if (labels[rank] < 0) {
      return InvalidArgumentError(
          absl::StrCat("host_of_rank[", rank, "] is ", labels[rank], "; host labels are >= 0"));
    }
    auto [it, added] = number.emplace(labels[rank], static_cast<int>(number.size()));
    if (added) topology.ranks_of_host.emplace_back();
    topology.host_of.push_back(it->second);
    topology.local_index.push_back(static_cast<int>(topology.ranks_of_host[it->second].size()));
    topology.ranks_of_host[it->second].push_back(rank);
  }
  return topology;
}

bool Topology::Uniform() const {
  for (const std::vector<int>& ranks : ranks_of_host) {
    if (ranks.size() != ranks_of_host[0].size()) return false;
  }
  return true;
}

bool Topology::IsHierarchical() const {
  if (hosts() < 2) return false;
  for (const std::vector<int>& ranks : ranks_of_host) {
    if (ranks.size() >= 2) return true;
  }
  return false;
}

uint64_t Topology::Digest() const {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a over the host numbers
  for (int host : host_of) {
    hash ^= static_cast<uint64_t>(host) + 1;
    hash *= 0x100000001b3ull;
  }
  return hash == 0 ? 1 : hash;
}

std::string Topology::Describe() const {
  std::vector<std::string> hosts;
  for (const std::vector<int>& ranks : ranks_of_host) hosts.push_back(absl::StrJoin(ranks, ","));
  return absl::StrCat(ranks_of_host.size(), ranks_of_host.size() == 1 ? " host: " : " hosts: ",
                      absl::StrJoin(hosts, " | "));
}

}  // namespace chorus
