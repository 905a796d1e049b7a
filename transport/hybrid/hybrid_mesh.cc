#include "chorus/transport/hybrid/hybrid_mesh.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chorus/core/status.h"
#include "chorus/transport/hybrid/split_receive.h"

namespace chorus {
namespace {

// "0-1,4,6-7": the ranks in `ranks` (ascending) with runs collapsed, so that a layout of
// thousands of ranks stays one readable line.
std::string RankRanges(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(ranks[i]) : absl::StrCat(ranks[i], "-", ranks[j]));
    i = j + 1;
  }
  return absl::StrJoin(parts, ",");
}

}  // namespace

HybridMesh::HybridMesh(int rank, int size, std::vector<int> host_of, Side local, Side network)
    : rank_(rank),
      size_(size),
      host_of_(std::move(host_of)),
      local_(std::move(local)),
      network_(std::move(network)) {}

absl::StatusOr<Connection*> HybridMesh::GetConnection(int peer) {
  if (!IsPeer(peer)) {
    return InvalidArgumentError(absl::StrCat("hybrid: rank ", rank_, " asked for a connection to ",
                                             peer, "; peers are [0, ", size_,
                                             ") other than itself"));
  }
  return SideOf(peer).mesh->GetConnection(peer);
}

RequestPtr HybridMesh::RecvFromAny(absl::Span<const int> peers, Tag tag, MemoryRef buffer) {
  std::vector<int> local;
  std::vector<int> remote;
  for (int peer : peers) {
    // Ranks outside the mesh are left to the inner mesh, which reports them.
    if (IsPeer(peer)) (SameHost(peer) ? local : remote).push_back(peer);
  }
  if (!local.empty() && !remote.empty()) {
    std::vector<int> distinct(peers.begin(), peers.end());
    std::sort(distinct.begin(), distinct.end());
    if (local.size() + remote.size() != peers.size() ||
        std::adjacent_find(distinct.begin(), distinct.end()) != distinct.end()) {
      return MakeFailedRequest(
          RequestKind::kRecv, -1, tag,
          InvalidArgumentError(absl::StrCat(
              "hybrid: RecvFromAny on rank ", rank_, ": peer list [", absl::StrJoin(peers, ", "),
              "] must name distinct other ranks of [0, ", size_, ")")));
    }
    // One part on each side; a claim they share lets exactly one of them take a message.
    const SplitReceive::Part parts[] = {{local_.mesh.get(), local}, {network_.mesh.get(), remote}};
    return SplitReceive::Post(
        parts, tag, buffer,
        absl::StrCat("any of ranks [", absl::StrJoin(local, ","), " (", local_.kind, "), ",
                     absl::StrJoin(remote, ","), " (", network_.kind, ")]"));
  }
  Mesh* mesh = !local.empty() ? local_.mesh.get() : network_.mesh.get();
  if (mesh == nullptr) mesh = local_.mesh != nullptr ? local_.mesh.get() : network_.mesh.get();
  return mesh->RecvFromAny(peers, tag, buffer);
}

SharedSlots* HybridMesh::ClaimSharedSlots() {
  for (int peer = 0; peer < size_; ++peer) {
    if (!SameHost(peer)) return nullptr;
  }
  return local_.mesh == nullptr ? nullptr : local_.mesh->ClaimSharedSlots();
}

void HybridMesh::Abort(absl::string_view reason) {
  if (local_.mesh != nullptr) local_.mesh->Abort(reason);
  if (network_.mesh != nullptr) network_.mesh->Abort(reason);
}

absl::string_view HybridMesh::RouteTo(int peer) const {
  if (!IsPeer(peer)) return "";
  return SideOf(peer).kind;
}

std::string HybridMesh::DescribeLayout() const {
  std::vector<int> local;
  std::vector<int> remote;
  for (int peer = 0; peer < size_; ++peer) {
    if (IsPeer(peer)) (SameHost(peer) ? local : remote).push_back(peer);
  }
  std::string text = absl::StrCat("rank ", rank_, " of ", size_, ":");
  if (!local.empty()) absl::StrAppend(&text, " ", local_.kind, " to ", RankRanges(local), ";");
  if (!remote.empty()) {
    absl::StrAppend(&text, " ", network_.kind, " to ", RankRanges(remote), ";");
  }
  if (local.empty() && remote.empty()) absl::StrAppend(&text, " no peers;");
  text.pop_back();
  return text;
}

}  // namespace chorus
