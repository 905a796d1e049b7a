// Matching of arriving messages to posted receives, the one implementation every transport
// uses. Per peer it keeps the receives posted for that peer and the messages that arrived
// before their receive, each FIFO per tag, which is what gives every transport the ordering
// promise of transport.h: messages with the same (peer, tag) are received in the order they were
// sent. A receive posted on several peers (Mesh::RecvFromAny) is queued on each of them until
// one matches it. Arrivals are numbered table-wide, so such a receive takes the message that
// arrived first among its peers.
//
// The table holds handles only (`Receive` and `Message` are the transport's pointer-like types,
// for example std::shared_ptr<MyRequest>); what a match does with the bytes, the claim of a
// receive split over several meshes (receive_claim.h) and the failure policy stay with the
// transport. Not thread-safe: the transport guards the table with the lock that guards its
// requests.
#ifndef CHORUS_TRANSPORT_MATCHING_MATCH_TABLE_H_
#define CHORUS_TRANSPORT_MATCHING_MATCH_TABLE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "chorus/transport/matching/tag_queue.h"
#include "chorus/transport/request.h"
#include "chorus/transport/transport.h"

namespace chorus::matching {

template <typename Receive, typename Message>
class MatchTable {
 public:
  // What a `Receive` handle points to: receives are told apart by their address.
  using ReceiveObject = std::remove_reference_t<decltype(*std::declval<const Receive&>())>;

  // A message that arrived before its receive, with its table-wide arrival number.
  struct Arrived {
    uint64_t arrival = 0;
    Message message;
  };

  // For a mesh of `size` ranks (the table has a queue pair per rank; the own rank's stays
  // empty).
  explicit MatchTable(int size) : peers_(static_cast<size_t>(size)) {}

  // --- Posted receives ---

  // Posts `receive` on `peer`, behind the receives already posted there with `tag`.
  void Post(int peer, Tag tag, Receive receive) {
    peers_[peer].posted[tag].push_back(std::move(receive));
  }

  // Posts one receive on each of `peers` (a receive from any of them). Matching it on one
  // peer, or unposting it, removes it from all of them.
  void PostOnEach(absl::Span<const int> peers, Tag tag, const Receive& receive) {
    if (peers.size() > 1) spread_[Identity(receive)].assign(peers.begin(), peers.end());
    for (int peer : peers) Post(peer, tag, receive);
  }

  // The oldest receive posted on `peer` with `tag`, or null.
  Receive* FrontPosted(int peer, Tag tag) {
    auto it = peers_[peer].posted.find(tag);
    return it == peers_[peer].posted.end() ? nullptr : &it->second.front();
  }

  // The oldest receive posted on `peer` with `tag` for which `pred(const Receive&)` holds, or
  // null.
  template <typename Pred>
  Receive* FindPosted(int peer, Tag tag, Pred pred) {
    auto it = peers_[peer].posted.find(tag);
    if (it == peers_[peer].posted.end()) return nullptr;
    auto found = std::find_if(it->second.begin(), it->second.end(), pred);
    return found == it->second.end() ? nullptr : &*found;
  }

  // Takes the oldest receive posted on `peer` with `tag` (off every peer it was posted on), or
  // returns nullopt.
  std::optional<Receive> PopPosted(int peer, Tag tag) {
    auto& posted = peers_[peer].posted;
    auto it = posted.find(tag);
    if (it == posted.end()) return std::nullopt;
    Receive receive = it->second.pop_front();
    if (it->second.empty()) posted.erase(it);
    UnpostSpread(Identity(receive), tag, peer);
    return receive;
  }

  // Takes `receive` off `peer` (one of the peers it was posted on) and off every other peer it
  // was posted on. False if it was posted nowhere (matched or taken already).
  bool Unpost(int peer, Tag tag, const ReceiveObject& receive) {
    const bool found = RemovePosted(peer, tag, &receive);
    return UnpostSpread(&receive, tag, peer) || found;
  }

  // Takes every receive posted on `peer`, oldest first within each tag. A receive from any of
  // several peers stays posted on the others: the caller decides, by its failure policy,
  // whether to Unpost it there too.
  std::vector<std::pair<Tag, Receive>> TakePosted(int peer) {
    std::vector<std::pair<Tag, Receive>> taken;
    for (auto& [tag, queue] : peers_[peer].posted) {
      while (!queue.empty()) taken.emplace_back(tag, queue.pop_front());
    }
    peers_[peer].posted.clear();
    return taken;
  }

  // The peers `receive` is posted on, if it was posted on several; empty otherwise.
  absl::Span<const int> SpreadOver(const ReceiveObject& receive) const {
    auto it = spread_.find(&receive);
    if (it == spread_.end()) return {};
    return it->second;
  }

  size_t PostedCount(int peer) const {
    size_t count = 0;
    for (const auto& [tag, queue] : peers_[peer].posted) count += queue.size();
    return count;
  }

  // --- Messages that arrived first ---

  // Queues a message from `peer` behind the earlier ones with `tag`; returns its arrival
  // number.
  uint64_t AddUnexpected(int peer, Tag tag, Message message) {
    const uint64_t arrival = next_arrival_++;
    peers_[peer].unexpected[tag].push_back(Arrived{arrival, std::move(message)});
    return arrival;
  }

  // The oldest message from `peer` with `tag`, or null.
  Arrived* OldestUnexpected(int peer, Tag tag) {
    auto it = peers_[peer].unexpected.find(tag);
    return it == peers_[peer].unexpected.end() ? nullptr : &it->second.front();
  }

  // Of `peers`, the one whose oldest message with `tag` arrived first; -1 if none has one.
  int OldestUnexpectedAmong(absl::Span<const int> peers, Tag tag) {
    int oldest = -1;
    uint64_t oldest_arrival = 0;
    for (int peer : peers) {
      const Arrived* arrived = OldestUnexpected(peer, tag);
      if (arrived != nullptr && (oldest < 0 || arrived->arrival < oldest_arrival)) {
        oldest = peer;
        oldest_arrival = arrived->arrival;
      }
    }
    return oldest;
  }

  // Takes the oldest message from `peer` with `tag`, or returns nullopt.
  std::optional<Message> PopUnexpected(int peer, Tag tag) {
    auto& unexpected = peers_[peer].unexpected;
    auto it = unexpected.find(tag);
    if (it == unexpected.end()) return std::nullopt;
    Message message = it->second.pop_front().message;
    if (it->second.empty()) unexpected.erase(it);
    return message;
  }

  // The first message from `peer` with `tag` for which `pred(const Arrived&)` holds, or null.
  template <typename Pred>
  Arrived* FindUnexpected(int peer, Tag tag, Pred pred) {
    auto it = peers_[peer].unexpected.find(tag);
    if (it == peers_[peer].unexpected.end()) return nullptr;
    auto found = std::find_if(it->second.begin(), it->second.end(), pred);
    return found == it->second.end() ? nullptr : &*found;
  }

  // Drops the first message from `peer` with `tag` for which `pred(const Arrived&)` holds;
  // false if there is none.
  template <typename Pred>
  bool EraseUnexpected(int peer, Tag tag, Pred pred) {
    auto& unexpected = peers_[peer].unexpected;
    auto it = unexpected.find(tag);
    if (it == unexpected.end()) return false;
    auto found = std::find_if(it->second.begin(), it->second.end(), pred);
    if (found == it->second.end()) return false;
    it->second.erase(found);
    if (it->second.empty()) unexpected.erase(it);
    return true;
  }

  // Keeps the messages from `peer` for which `keep(const Arrived&)` holds and drops the rest,
  // in order.
  template <typename Keep>
  void RetainUnexpected(int peer, Keep keep) {
    auto& unexpected = peers_[peer].unexpected;
    for (auto it = unexpected.begin(); it != unexpected.end();) {
      auto& queue = it->second;
      queue.erase(std::remove_if(queue.begin(), queue.end(),
                                 [&](const Arrived& arrived) { return !keep(arrived); }),
                  queue.end());
      if (queue.empty()) {
        unexpected.erase(it++);
      } else {
        ++it;
      }
    }
  }

  // Forgets everything posted and arrived (the transport has failed every request).
  void Clear() {
    for (PeerQueues& peer : peers_) {
      peer.posted.clear();
      peer.unexpected.clear();
    }
    spread_.clear();
  }

 private:
  struct PeerQueues {
    absl::flat_hash_map<Tag, TagQueue<Receive>> posted;
    absl::flat_hash_map<Tag, TagQueue<Arrived>> unexpected;
  };

  static const ReceiveObject* Identity(const Receive& receive) { return &*receive; }

  bool RemovePosted(int peer, Tag tag, const ReceiveObject* receive) {
    auto& posted = peers_[peer].posted;
    auto it = posted.find(tag);
    if (it == posted.end()) return false;
    auto& queue = it->second;
    auto found = std::find_if(queue.begin(), queue.end(), [&](const Receive& posted_receive) {
      return Identity(posted_receive) == receive;
    });
    if (found == queue.end()) return false;
    queue.erase(found);
    if (queue.empty()) posted.erase(it);
    return true;
  }

  // Takes a receive posted on several peers off all of them but `except`; false if it was not
  // such a receive.
  bool UnpostSpread(const ReceiveObject* receive, Tag tag, int except) {
    if (spread_.empty()) return false;
    auto it = spread_.find(receive);
    if (it == spread_.end()) return false;
    const std::vector<int> peers = std::move(it->second);
    spread_.erase(it);
    for (int peer : peers) {
      if (peer != except) RemovePosted(peer, tag, receive);
    }
    return true;
  }

  std::vector<PeerQueues> peers_;
  // Receives posted on several peers, by identity: the peers they were posted on.
  absl::flat_hash_map<const ReceiveObject*, std::vector<int>> spread_;
  uint64_t next_arrival_ = 0;
};

// Checks the peer list of a receive from any of several peers on rank `rank` of a mesh of
// `size`: at least one peer, all distinct, all in the mesh and none the rank itself.
absl::Status CheckAnyPeers(absl::Span<const int> peers, int rank, int size);

// Everything a transport checks before it posts a receive from any of several peers: the peers
// (CheckAnyPeers), a host buffer (`transport`, "the TCP transport", names who refuses others),
// and a mesh that was not aborted (`aborted`: OK, or the status its requests fail with).
absl::Status CheckAnyReceive(absl::Span<const int> peers, int rank, int size,
                             const MemoryRef& buffer, const absl::Status& aborted,
                             absl::string_view transport);

}  // namespace chorus::matching

#endif  // CHORUS_TRANSPORT_MATCHING_MATCH_TABLE_H_
