// One communicator's view of its peers over a verbs device: a queue pair per peer, created and
// brought up when the mesh is (the published address carries every queue pair's number, so one
// exchange through the store connects them all), the match table of every connection, and
// RecvFromAny and Abort.
#ifndef CHORUS_TRANSPORT_IBVERBS_VERBS_MESH_H_
#define CHORUS_TRANSPORT_IBVERBS_VERBS_MESH_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "chorus/transport/ibverbs/verbs_connection.h"
#include "chorus/transport/ibverbs/verbs_engine.h"
#include "chorus/transport/ibverbs/verbs_request.h"
#include "chorus/transport/ibverbs/wire.h"
#include "chorus/transport/matching/match_table.h"
#include "chorus/transport/transport.h"

namespace chorus::ibverbs {

class VerbsMesh : public Mesh, public CancelTarget {
 public:
  VerbsMesh(std::shared_ptr<VerbsEngine> engine, int rank, int size, uint64_t mesh_id);
  ~VerbsMesh() override;

  // Creates a queue pair per peer; the address to publish.
  absl::StatusOr<PublishedAddress> Prepare();
  // Brings every queue pair up towards its peer as the peers published themselves (index =
  // rank). kMismatch naming a peer whose slots or link layer differ from this rank's.
  absl::Status Connect(const std::vector<PublishedAddress>& peers);
  // Starts sending, once every peer's queue pairs are ready to receive (a packet that reaches a
  // queue pair before that is dropped, and only the retransmission of the device, which not
  // every device does reliably, would bring it back). The failure of a connection that failed
  // while it was set up.
  absl::Status Start();

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::StatusOr<Connection*> GetConnection(int peer) override;
  RequestPtr RecvFromAny(absl::Span<const int> peers, Tag tag, MemoryRef buffer) override;
  RequestPtr RecvFromAnyPart(absl::Span<const int> peers, Tag tag, MemoryRef buffer,
                             std::shared_ptr<ReceiveClaim> claim, int part) override;
  void Abort(absl::string_view reason) override;

  // --- For its connections, with the engine's mutex held where it guards ---
  VerbsEngine& engine() const { return *engine_; }
  const std::shared_ptr<VerbsEngine>& engine_ptr() const { return engine_; }
  uint64_t mesh_id() const { return mesh_id_; }
  const absl::Status& aborted() const { return aborted_; }
  using Matching = matching::MatchTable<std::shared_ptr<RecvSlot>, std::shared_ptr<Inbound>>;
  Matching& matching() { return matching_; }
  // CancelTarget: a receive from any of several peers.
  void CancelLocked(VerbsRequest& request, std::unique_lock<std::mutex>& lock) override;
  // Held by a connection's cancel while it waits with the mutex released: the destructor
  // waits for every one to end before it frees the connections.
  class CancelWait {
   public:
    explicit CancelWait(VerbsMesh& mesh) : mesh_(mesh) { ++mesh_.cancels_waiting_; }
    ~CancelWait() { --mesh_.cancels_waiting_; }
    CancelWait(const CancelWait&) = delete;
    CancelWait& operator=(const CancelWait&) = delete;

   private:
    VerbsMesh& mesh_;
  };

 private:
  const std::shared_ptr<VerbsEngine> engine_;
  const int rank_;
  const int size_;
  const uint64_t mesh_id_;
  const uint32_t psn_;
  std::vector<std::unique_ptr<VerbsConnection>> connections_;  // index = peer; own is null

  // Guarded by the engine's mutex.
  absl::Status aborted_;
  Matching matching_;
  int cancels_waiting_ = 0;
};

}  // namespace chorus::ibverbs

#endif  // CHORUS_TRANSPORT_IBVERBS_VERBS_MESH_H_
