#include "chorus/transport/matching/match_table.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chorus/core/status.h"

namespace chorus::matching {

absl::Status CheckAnyPeers(absl::Span<const int> peers, int rank, int size) {
  std::vector<int> sorted(peers.begin(), peers.end());
  std::sort(sorted.begin(), sorted.end());
  const bool valid = !sorted.empty() && sorted.front() >= 0 && sorted.back() < size &&
                     std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end() &&
                     !std::binary_search(sorted.begin(), sorted.end(), rank);
  if (valid) return absl::OkStatus();
  return InvalidArgumentError(absl::StrCat(
      "a receive from any of ranks [", absl::StrJoin(peers, ", "), "] on rank ", rank,
      " must name at least one rank, each once, of [0, ", size, ") other than itself"));
}

absl::Status CheckAnyReceive(absl::Span<const int> peers, int rank, int size,
                             const MemoryRef& buffer, const absl::Status& aborted,
                             absl::string_view transport) {
  CHORUS_RETURN_IF_ERROR(CheckAnyPeers(peers, rank, size));
  if (buffer.type != MemoryType::kHost) {
    return InvalidArgumentError(absl::StrCat(transport, " receives into host memory only"));
  }
  return aborted;
}

}  // namespace chorus::matching
