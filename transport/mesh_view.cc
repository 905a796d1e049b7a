#include "chorus/transport/mesh_view.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "chorus/core/status.h"

namespace chorus {
namespace {

// A request of the parent mesh seen through a view: it completes when the parent's does, with
// the sender renumbered to the view's ranks.
class ViewRequest final : public Request {
 public:
  ViewRequest(RequestPtr inner, int peer)
      : Request(inner->kind(), peer, inner->tag()), inner_(std::move(inner)) {}

  // The parent's transport makes progress in its own Wait; this request completes right after
  // (its observer runs on the thread that completed the parent's request).
  absl::Status Wait(Deadline deadline) override {
    const absl::Status status = inner_->Wait(deadline);
    if (!inner_->IsDone()) return status;
    return Request::Wait(Deadline::After(kObserverGrace));
  }

  void Cancel() override { inner_->Cancel(); }

  const RequestPtr& inner() const { return inner_; }

 private:
  // Bounds the wait for the observer, which runs within microseconds of the parent's
  // completion; reaching it would be a bug, reported as a deadline rather than a hang.
  static constexpr absl::Duration kObserverGrace = absl::Seconds(10);

  const RequestPtr inner_;
};

}  // namespace

class MeshView::ViewConnection final : public Connection {
 public:
  ViewConnection(MeshView& view, int peer, Connection& inner)
      : view_(view), peer_(peer), inner_(inner) {}

  int peer() const override { return peer_; }

  RequestPtr Send(Tag tag, ConstMemoryRef buffer) override {
    return view_.Post(RequestKind::kSend, peer_, tag, absl::OkStatus(),
                      [&] { return inner_.Send(tag, buffer); });
  }

  RequestPtr Recv(Tag tag, MemoryRef buffer) override {
    return view_.Post(RequestKind::kRecv, peer_, tag, absl::OkStatus(),
                      [&] { return inner_.Recv(tag, buffer); });
  }

  RequestPtr RecvWithSink(Tag tag, MemoryRef buffer, RecvSink* sink) override {
    return view_.Post(RequestKind::kRecv, peer_, tag, absl::OkStatus(),
                      [&] { return inner_.RecvWithSink(tag, buffer, sink); });
  }

 private:
  MeshView& view_;
  const int peer_;
  Connection& inner_;
};

absl::StatusOr<std::unique_ptr<MeshView>> MeshView::Create(std::shared_ptr<Mesh> parent,
                                                          std::vector<int> members) {
  std::vector<int> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  const auto own = std::find(members.begin(), members.end(), parent->rank());
  if (members.empty() || sorted.front() < 0 || sorted.back() >= parent->size() ||
      std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() || own == members.end()) {
    return InvalidArgumentError(absl::StrCat(
        "a view of a mesh of ", parent->size(), " ranks needs distinct ranks of it including ",
        "its own (", parent->rank(), "); got [", absl::StrJoin(members, ","), "]"));
  }
  const int rank = static_cast<int>(own - members.begin());
  return std::unique_ptr<MeshView>(new MeshView(std::move(parent), std::move(members), rank));
}

MeshView::MeshView(std::shared_ptr<Mesh> parent, std::vector<int> members, int rank)
    : parent_(std::move(parent)),
      members_(std::move(members)),
      view_rank_of_([&] {
        auto view_rank_of = std::make_shared<std::vector<int>>(parent_->size(), -1);
        for (size_t i = 0; i < members_.size(); ++i) (*view_rank_of)[members_[i]] = i;
        return view_rank_of;
      }()),
      rank_(rank),
      connections_(members_.size()) {}

MeshView::~MeshView() = default;

int MeshView::ViewRank(int parent_rank) const {
  return parent_rank >= 0 && parent_rank < static_cast<int>(view_rank_of_->size())
             ? (*view_rank_of_)[parent_rank]
             : -1;
}

absl::StatusOr<Connection*> MeshView::GetConnection(int peer) {
  if (peer < 0 || peer >= size() || peer == rank_) {
    return InvalidArgumentError(absl::StrCat("rank ", peer, " is not another rank of this view of ",
                                             size(), " ranks (this is rank ", rank_, ")"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (connections_[peer] == nullptr) {
    CHORUS_ASSIGN_OR_RETURN(Connection * inner, parent_->GetConnection(members_[peer]));
    connections_[peer] = std::make_unique<ViewConnection>(*this, peer, *inner);
  }
  return connections_[peer].get();
}

absl::StatusOr<std::vector<int>> MeshView::ParentRanks(absl::Span<const int> peers) const {
  std::vector<int> parent_ranks;
  parent_ranks.reserve(peers.size());
  for (int peer : peers) {
    if (peer < 0 || peer >= size()) {
      return InvalidArgumentError(absl::StrCat("RecvFromAny on rank ", rank_, ": rank ", peer,
                                               " is not a rank of this view of ", size()));
    }
    parent_ranks.push_back(members_[peer]);
  }
  return parent_ranks;
}

RequestPtr MeshView::RecvFromAny(absl::Span<const int> peers, Tag tag, MemoryRef buffer) {
  absl::StatusOr<std::vector<int>> parent_ranks = ParentRanks(peers);
  return Post(RequestKind::kRecv, -1, tag, parent_ranks.status(),
              [&] { return parent_->RecvFromAny(*parent_ranks, tag, buffer); });
}

RequestPtr MeshView::RecvFromAnyPart(absl::Span<const int> peers, Tag tag, MemoryRef buffer,
                                     std::shared_ptr<ReceiveClaim> claim, int part) {
  absl::StatusOr<std::vector<int>> parent_ranks = ParentRanks(peers);
  return Post(RequestKind::kRecv, -1, tag, parent_ranks.status(), [&] {
    return parent_->RecvFromAnyPart(*parent_ranks, tag, buffer, std::move(claim), part);
  });
}

template <typename PostOnParent>
RequestPtr MeshView::Post(RequestKind kind, int peer, Tag tag, absl::Status refused,
                          PostOnParent post_on_parent) {
  if (refused.ok()) refused = Aborted();
  if (!refused.ok()) return MakeFailedRequest(kind, peer, tag, std::move(refused));
  return Adopt(post_on_parent(), peer);
}

RequestPtr MeshView::Adopt(RequestPtr inner, int peer) {
  auto outer = std::make_shared<ViewRequest>(inner, peer);
  std::weak_ptr<ViewRequest> weak = outer;
  inner->OnCompletion([weak, view_rank_of = view_rank_of_] {
    const std::shared_ptr<ViewRequest> request = weak.lock();
    if (request == nullptr) return;
    const Request& done = *request->inner();
    const int sender = done.peer();
    const bool known = sender >= 0 && sender < static_cast<int>(view_rank_of->size());
    request->Complete(done.status(), done.bytes(), known ? (*view_rank_of)[sender] : -1);
  });
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_.ok()) {
    outer->Cancel();
    return outer;
  }
  if (posted_.size() >= prune_at_) {
    posted_.erase(std::remove_if(posted_.begin(), posted_.end(),
                                 [](const std::weak_ptr<Request>& request) {
                                   const RequestPtr live = request.lock();
                                   return live == nullptr || live->IsDone();
                                 }),
                  posted_.end());
    prune_at_ = std::max<size_t>(64, 2 * posted_.size());
  }
  posted_.push_back(outer);
  return outer;
}

absl::Status MeshView::Aborted() {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

void MeshView::Abort(absl::string_view reason) {
  std::vector<std::weak_ptr<Request>> posted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.ok()) aborted_ = AbortedError(absl::StrCat("aborted: ", reason));
    posted.swap(posted_);
  }
  for (const std::weak_ptr<Request>& weak : posted) {
    if (const RequestPtr request = weak.lock()) request->Cancel();
  }
}

std::vector<int> MeshView::HostOfRanks() const {
  const std::vector<int> parent_hosts = parent_->HostOfRanks();
  if (parent_hosts.empty()) return {};
  std::vector<int> hosts;
  hosts.reserve(members_.size());
  for (int member : members_) hosts.push_back(parent_hosts[member]);
  return hosts;
}

}  // namespace chorus
