// The mesh of the hybrid transport: connections to peers on this rank's host come from a
// shared-memory mesh, connections to all other peers from a network mesh. See
// docs/transport-hybrid.md.
#ifndef CHORUS_TRANSPORT_HYBRID_HYBRID_MESH_H_
#define CHORUS_TRANSPORT_HYBRID_HYBRID_MESH_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "chorus/transport/transport.h"

namespace chorus {

// Thread-safe: the routing is fixed at construction and the inner meshes are thread-safe.
class HybridMesh final : public Mesh {
 public:
  // One side of the mesh: the inner mesh (null when no rank pair of the job needs that side)
  // and the kind of the device that made it ("shm", "tcp"), for routes and errors.
  struct Side {
    std::unique_ptr<Mesh> mesh;
    std::string kind;
  };

  // `host_of[r]` is rank r's host number; peers with this rank's number use `local`, the others
  // `network`. Both inner meshes span all `size` ranks, so peer numbers, request peers and
  // errors need no translation.
  HybridMesh(int rank, int size, std::vector<int> host_of, Side local, Side network);

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::StatusOr<Connection*> GetConnection(int peer) override;

  // Delegates to the side that holds every peer in `peers`. Peers on both sides get a
  // SplitReceive: a part on each inner mesh, sharing a claim so that exactly one message is
  // taken (docs/transport-hybrid.md).
  RequestPtr RecvFromAny(absl::Span<const int> peers, Tag tag, MemoryRef buffer) override;

  // Aborts both inner meshes.
  void Abort(absl::string_view reason) override;

  // The kind of the transport that carries traffic to `peer` ("shm", "tcp"); empty for this
  // rank itself and for ranks outside the mesh.
  absl::string_view RouteTo(int peer) const;

  // Rank `rank`'s host number (0 <= rank < size()): hosts are numbered from 0 in the order of
  // their lowest rank, the same on every rank, so a hierarchical algorithm can pick, say, the
  // lowest rank of each host as its leader without another exchange.
  int HostOf(int rank) const { return host_of_[rank]; }
  std::vector<int> HostOfRanks() const override { return host_of_; }
  // The shared-memory side's slots when every rank is on this host.
  SharedSlots* ClaimSharedSlots() override;

  // "rank 3 of 8: shm to 2; tcp to 0-1,4-7", logged at info when the mesh is created.
  std::string DescribeLayout() const;

 private:
  bool IsPeer(int peer) const { return peer >= 0 && peer < size_ && peer != rank_; }
  bool SameHost(int peer) const { return host_of_[peer] == host_of_[rank_]; }
  const Side& SideOf(int peer) const { return SameHost(peer) ? local_ : network_; }

  const int rank_;
  const int size_;
  const std::vector<int> host_of_;
  const Side local_;
  const Side network_;
};

}  // namespace chorus

#endif  // CHORUS_TRANSPORT_HYBRID_HYBRID_MESH_H_
