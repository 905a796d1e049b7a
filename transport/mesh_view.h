// A mesh of some of another mesh's ranks, over that mesh's own connections: what a
// sub-communicator (a split, a group) runs on, with no new connection, listening socket or
// store traffic. Ranks are renumbered: view rank i is the parent's rank members[i].
//
// Tags are not translated: sub-communicators keep apart from their parent and from each other
// by the communicator part of their tags (collectives/tag.h), as communicators sharing one mesh
// always do. Errors a transport reports name the parent's ranks.
//
// Abort fails this view's pending and later requests only, cancelling them, and leaves the
// parent and its other views running; the view's peers learn of it through the communicator's
// store record, not through closed connections. A peer failure in the parent reaches every view.
#ifndef CHORUS_TRANSPORT_MESH_VIEW_H_
#define CHORUS_TRANSPORT_MESH_VIEW_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "chorus/transport/request.h"
#include "chorus/transport/transport.h"

namespace chorus {

// Thread-safe.
class MeshView final : public Mesh {
 public:
  // `members`: distinct ranks of `parent` in view order, including the parent's own rank.
  // The view shares ownership of `parent`. kInvalidArgument for any other member list.
  static absl::StatusOr<std::unique_ptr<MeshView>> Create(std::shared_ptr<Mesh> parent,
                                                          std::vector<int> members);
  ~MeshView() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  absl::StatusOr<Connection*> GetConnection(int peer) override;
  RequestPtr RecvFromAny(absl::Span<const int> peers, Tag tag, MemoryRef buffer) override;
  RequestPtr RecvFromAnyPart(absl::Span<const int> peers, Tag tag, MemoryRef buffer,
                             std::shared_ptr<ReceiveClaim> claim, int part) override;
  void Abort(absl::string_view reason) override;
  std::vector<int> HostOfRanks() const override;

  // The parent's rank of view rank `rank`, and the view rank of parent rank `parent_rank`
  // (-1 when it is not a member).
  int ParentRank(int rank) const { return members_[rank]; }
  int ViewRank(int parent_rank) const;

 private:
  class ViewConnection;
  MeshView(std::shared_ptr<Mesh> parent, std::vector<int> members, int rank);

  // The parent's ranks of `peers` (view ranks), or an error naming the first one out of range.
  absl::StatusOr<std::vector<int>> ParentRanks(absl::Span<const int> peers) const;
  // Posts a request on the parent through `post_on_parent` and adopts it, unless `refused` (a bad
  // argument) or the view's abort fails it at once, without touching the parent.
  template <typename PostOnParent>
  RequestPtr Post(RequestKind kind, int peer, Tag tag, absl::Status refused,
                  PostOnParent post_on_parent);
  // A request posted on the parent, as the view's: `peer` is its view rank (-1 for a receive
  // from any of several peers, whose sender is translated when it completes). Registered so
  // that Abort can cancel it.
  RequestPtr Adopt(RequestPtr inner, int peer);
  // The abort's error for a request about to be posted; OK while the view is not aborted.
  absl::Status Aborted();

  const std::shared_ptr<Mesh> parent_;
  const std::vector<int> members_;
  const std::shared_ptr<const std::vector<int>> view_rank_of_;  // by parent rank; -1: none
  const int rank_;
  std::mutex mu_;
  std::vector<std::unique_ptr<ViewConnection>> connections_ ABSL_GUARDED_BY(mu_);  // by rank
  std::vector<std::weak_ptr<Request>> posted_ ABSL_GUARDED_BY(mu_);
  size_t prune_at_ ABSL_GUARDED_BY(mu_) = 64;
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace chorus

#endif  // CHORUS_TRANSPORT_MESH_VIEW_H_
