// A verbs connection to one peer of a mesh: one reliable-connected queue pair, the eager slots
// the peer writes into (the ring) and the ones this side writes from (the outbox), both
// registered once, and the protocol over them (wire.h):
//
//   small message   one kData slot, copied out by the receiver at once (into the matched
//                   receive's buffer, or a buffer of its own until a receive comes)
//   large message   a kAnnounce slot naming the sender's registered buffer; the receiver
//                   RDMA-reads the message straight into the matched receive's buffer, or into
//                   a buffer of its own when no receive is posted yet (so sends complete without
//                   one, as on every transport), through the cache's registration of that buffer
//                   (bounce buffers when registering fails), in chunks, several in flight, and
//                   answers kDone, which completes the send
//   by copy         a large message whose buffer cannot be registered goes as kData fragments
//
// Slots are flow-controlled by credits (credit_window.h), so the ring is never overrun and a
// slow receiver only queues the sender. Messages with one tag keep their order: the queue pair
// delivers in order and the mesh's match table matches in arrival order.
#ifndef CHORUS_TRANSPORT_IBVERBS_VERBS_CONNECTION_H_
#define CHORUS_TRANSPORT_IBVERBS_VERBS_CONNECTION_H_

#include <infiniband/verbs.h>
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "chorus/transport/ibverbs/credit_window.h"
#include "chorus/transport/ibverbs/registration_cache.h"
#include "chorus/transport/ibverbs/verbs_context.h"
#include "chorus/transport/ibverbs/verbs_engine.h"
#include "chorus/transport/ibverbs/verbs_request.h"
#include "chorus/transport/ibverbs/wire.h"
#include "chorus/transport/receive_claim.h"
#include "chorus/transport/transport.h"

namespace chorus::ibverbs {

class VerbsMesh;
struct Inbound;
class VerbsConnection;

// How many RDMA reads from peers a queue pair of this device answers at once (published, so
// that no peer reads deeper).
uint32_t ResponderReadDepth(const VerbsContext& context);

// A posted receive; a receive from any of several peers is one slot posted on each.
struct RecvSlot {
  std::shared_ptr<VerbsRequest> request;
  uint8_t* data = nullptr;
  size_t capacity = 0;
  std::shared_ptr<ReceiveClaim> claim;  // Mesh::RecvFromAnyPart
  int part = 0;
  std::vector<int> peers;  // posted on
  // Once a message is matched to it: the message, and the connection it came over.
  std::shared_ptr<Inbound> inbound;
  VerbsConnection* matched_on = nullptr;

  bool WinClaim() const { return claim == nullptr || claim->TryClaim(part); }
};

// A message from the peer, from its first slot on.
struct Inbound {
  Tag tag = 0;
  uint64_t size = 0;
  uint32_t send_id = 0;
  // kAnnounce: read from here.
  bool announced = false;
  uint64_t remote_address = 0;
  uint32_t rkey = 0;
  // Where bytes go: the matched receive's buffer, else `buffered` (arrived first), else
  // nowhere (`discard`: too long for its receive, or the receive was cancelled).
  std::shared_ptr<RecvSlot> slot;
  std::unique_ptr<uint8_t[]> buffered;
  bool discard = false;
  uint64_t arrived = 0;  // kData bytes
  // Reads of an announced message.
  uint64_t read_posted = 0;
  uint64_t read_done = 0;
  int reads_in_flight = 0;
  std::optional<RegistrationCache::Lease> lease;
  bool through_bounce = false;
  bool done_sent = false;

  bool complete() const { return announced ? read_done == size : arrived == size; }
  // Where reads land: `buffered` when the message arrived before its receive, else the
  // receive's buffer.
  uint8_t* ReadTarget() const { return buffered != nullptr ? buffered.get() : slot->data; }
};

// A message (or a kDone answer) waiting for slots.
struct Outbound {
  std::shared_ptr<VerbsRequest> request;  // null for kDone
  SlotKind kind = SlotKind::kData;
  Tag tag = 0;
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  uint32_t send_id = 0;
  uint64_t offset = 0;  // kData: bytes written so far
  // After a cancel of a message partly written by copy: the rest goes from here.
  std::unique_ptr<uint8_t[]> copy;
  std::optional<RegistrationCache::Lease> lease;  // kAnnounce: until kDone
};

class VerbsConnection : public Connection, public QueuePairOwner, public CancelTarget {
 public:
  VerbsConnection(VerbsMesh& mesh, int peer, uint32_t serial);
  ~VerbsConnection() override;

  // Creates the queue pair (INIT) and the slots; what this side publishes for the peer.
  absl::Status Create();
  PeerEndpoint LocalEndpoint() const;
  // Brings the queue pair up towards the peer as it published itself.
  absl::Status BringUp(const PublishedAddress& peer, uint32_t local_psn);
  // With the engine's mutex held, once the queue pair is ready to receive: takes its
  // completions (the peer may send as soon as it is).
  void Attach();
  // With the engine's mutex held, once the peer's queue pair is ready to receive too: sends
  // what was posted meanwhile. The failure when the connection failed while it was set up.
  absl::Status Start();
  // 0 before Create() made the queue pair.
  uint32_t qp_num() const { return qp_num_; }

  int peer() const override { return peer_; }
  using Connection::Recv;
  using Connection::Send;
  RequestPtr Send(Tag tag, ConstMemoryRef buffer) override;
  RequestPtr Recv(Tag tag, MemoryRef buffer) override;

  // --- With the engine's mutex held ---
  // Gives the oldest message with `tag` that arrived before its receive to `slot`.
  void TakeUnexpected(Tag tag, const std::shared_ptr<RecvSlot>& slot);
  void Fail(const absl::Status& status);
  bool failed() const { return state_ == State::kFailed; }
  const absl::Status& failure() const { return failure_; }
  // A matched receive's cancel (the mesh hands those over).
  void CancelMatchedRecv(RecvSlot& slot, std::unique_lock<std::mutex>& lock);

  // QueuePairOwner.
  void OnCompletion(const ibv_wc& completion) override;
  void OnFatalEvent(const char* what) override;
  void OnTick(absl::Time now) override;
  void Pump() override;
  // CancelTarget: sends and single-peer receives.
  void CancelLocked(VerbsRequest& request, std::unique_lock<std::mutex>& lock) override;

 private:
  enum class State { kCreated, kUp, kFailed };
  enum class Op : uint32_t { kRecv = 1, kSlotWrite, kCredits, kLiveness, kRead };

  uint64_t WorkId(Op op, uint32_t value) const;
  absl::Status ModifyToInit();
  absl::Status ModifyToRtr();
  absl::Status ModifyToRts();
  // Posts one receive work request (they carry no buffer); the errno of ibv_post_recv.
  int PostOneReceive();
  absl::Status PostReceives();
  // Posts `wr` (what: for the error); false, with the connection failed, when it cannot.
  bool PostSend(ibv_send_wr& wr, absl::string_view what);
  bool PostControl(Op op, ImmediateKind kind, uint32_t value);
  bool PostProbe();
  // How long a liveness probe may go unanswered before the peer counts as gone.
  absl::Duration ProbeTimeout() const;

  void PumpSends();
  void PumpReads();
  bool SendRoomFor(int writes) const;
  void WriteSlot(Outbound& out, uint32_t slot);

  void OnArrival(const ibv_wc& completion);
  void OnSlot(uint32_t slot);
  // A buffer of its own for a message that arrived before its receive; false (the connection
  // failed) when there is no memory for it.
  bool BufferEarly(Inbound& inbound);
  void OnData(const SlotHeader& header, const uint8_t* payload);
  void OnAnnounce(const SlotHeader& header);
  void OnDone(const SlotHeader& header);
  void OnReadCompleted(uint32_t ticket, bool ok);
  // The oldest receive posted for `tag` that wins its claim, taken off the table; or null.
  std::shared_ptr<RecvSlot> PopPosted(Tag tag);
  void Match(const std::shared_ptr<Inbound>& inbound, const std::shared_ptr<RecvSlot>& slot);
  void StartReads(const std::shared_ptr<Inbound>& inbound);
  void FinishRecv(const std::shared_ptr<Inbound>& inbound, absl::Status status);
  void QueueDone(Inbound& inbound);
  absl::Status Broken(absl::string_view what) const;
  uint8_t* RingSlot(uint32_t slot) const { return memory_.get() + slot * slot_bytes_; }
  uint8_t* OutboxSlot(uint32_t slot) const { return RingSlot(slots_ + slot); }
  bool HasPendingWork() const;

  VerbsMesh& mesh_;
  VerbsEngine& engine_;
  VerbsContext& context_;
  const int peer_;
  const uint32_t serial_;
  const uint32_t slots_;
  const size_t slot_bytes_;
  std::shared_ptr<const std::string> label_;

  State state_ = State::kCreated;
  absl::Status failure_;
  ibv_qp* qp_ = nullptr;
  uint32_t qp_num_ = 0;  // kept when Fail() destroys the queue pair: the mesh detaches it
  uint32_t reserved_completions_ = 0;  // in the engine's completion queue
  uint32_t max_inline_ = 0;
  uint32_t max_send_wr_ = 0;
  uint32_t recv_depth_ = 0;
  uint32_t read_depth_ = 0;  // RDMA reads this side may have outstanding
  AlignedBytes memory_;      // ring (slots_ slots), outbox (slots_ slots), liveness probe landing
  MemoryRegion region_;
  bool registered_ = false;

  // The peer as published, and what the queue pair was brought up with.
  PublishedAddress remote_;
  PeerEndpoint remote_endpoint_;
  uint32_t local_psn_ = 0;
  int path_mtu_bytes_ = 0;
  pid_t peer_pid_ = 0;  // the peer's process when it is another process of this host

  // Sending.
  CreditWindow credits_;
  std::vector<bool> outbox_busy_;
  // By outbox slot: the message whose last slot it is, completed when that write is.
  std::vector<std::shared_ptr<Outbound>> written_;
  uint32_t send_wrs_in_flight_ = 0;
  bool credit_report_in_flight_ = false;
  bool liveness_in_flight_ = false;
  absl::Time last_probe_ = absl::InfinitePast();
  absl::Time last_progress_ = absl::InfinitePast();  // the last completion on the queue pair
  uint32_t next_send_id_ = 1;
  std::deque<std::shared_ptr<Outbound>> queue_;
  absl::flat_hash_map<uint32_t, std::shared_ptr<Outbound>> announced_;  // awaiting kDone

  // Receiving.
  absl::flat_hash_map<uint32_t, std::shared_ptr<Inbound>> assembling_;  // kData fragments
  struct ReadChunk {
    std::shared_ptr<Inbound> inbound;
    uint64_t offset = 0;
    uint32_t bytes = 0;
    BounceBuffer bounce;
    bool bounced = false;
  };
  std::deque<std::shared_ptr<Inbound>> read_queue_;  // announced messages with reads to post
  absl::flat_hash_map<uint32_t, ReadChunk> reads_;   // posted, by ticket
  uint32_t next_ticket_ = 0;
};

}  // namespace chorus::ibverbs

#endif  // CHORUS_TRANSPORT_IBVERBS_VERBS_CONNECTION_H_
