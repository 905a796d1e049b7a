// Which ranks share a host: the one fact about locality the collectives layer knows. It is
// learned once, when a communicator is created (CommunicatorOptions::host_of_rank, else
// Mesh::HostOfRanks(), else one host), and read by the selector and the hierarchical
// algorithm; the algorithms never ask the transport.
#ifndef CHORUS_COLLECTIVES_ENGINE_TOPOLOGY_H_
#define CHORUS_COLLECTIVES_ENGINE_TOPOLOGY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace chorus {

// A value type; thread-compatible.
struct Topology {
  // Every rank on one host.
  static Topology Flat(int size);

  // From any host labels, one per rank (equal labels = same host). Hosts are renumbered from 0
  // in the order of their lowest rank, so every rank derives the same numbers. InvalidArgument
  // when `labels` does not have `size` entries or holds a negative label.
  static absl::StatusOr<Topology> FromLabels(const std::vector<int>& labels, int size);

  int size() const { return static_cast<int>(host_of.size()); }
  int hosts() const { return static_cast<int>(ranks_of_host.size()); }
  int HostOf(int rank) const { return host_of[rank]; }
  // Rank `rank`'s index among the ranks of its host (ascending rank order).
  int LocalIndex(int rank) const { return local_index[rank]; }
  // True when every host holds the same number of ranks.
  bool Uniform() const;
  // True when a hierarchy has two levels: at least two hosts, and some host with two ranks or
  // more. Only then does the selector consider the hierarchical algorithm.
  bool IsHierarchical() const;
  // "2 hosts: 0,1 | 2,3", for logs.
  std::string Describe() const;
  // A hash of the layout (nonzero), for the collective header.
  uint64_t Digest() const;

  std::vector<int> host_of;                     // by rank
  std::vector<int> local_index;                 // by rank
  std::vector<std::vector<int>> ranks_of_host;  // by host, ascending
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_ENGINE_TOPOLOGY_H_
