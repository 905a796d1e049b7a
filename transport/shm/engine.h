// The engine of one shm mesh: matching, the ring protocol, progress, waiting and failure.
//
// Progress is made by whichever thread needs it, under one mutex: a thread in Wait() polls the
// inbound rings itself (no hand-off to another thread on the fast path), then sleeps on the
// inbox doorbell. A background thread watches peer liveness (pidfd) and makes progress only
// while no thread waits, so requests that nobody waits on (IsDone() pollers, unexpected
// messages filling a ring) still move.
#ifndef CHORUS_TRANSPORT_SHM_ENGINE_H_
#define CHORUS_TRANSPORT_SHM_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "chorus/transport/matching/match_table.h"
#include "chorus/transport/receive_claim.h"
#include "chorus/transport/request.h"
#include "chorus/transport/shared_slots.h"
#include "chorus/transport/shm/arena.h"
#include "chorus/transport/shm/hold_schedule.h"
#include "chorus/transport/shm/inbound_streams.h"
#include "chorus/transport/shm/layout.h"
#include "chorus/transport/shm/peer_liveness.h"
#include "chorus/transport/shm/ring.h"
#include "chorus/transport/shm/segment.h"
#include "chorus/transport/shm/shm_device.h"
#include "chorus/transport/shm/shm_request.h"
#include "chorus/transport/shm/single_copy.h"
#include "chorus/transport/shm/waiters.h"
#include "chorus/transport/transport.h"

namespace chorus::shm {

// Thread-safe. Created by the device once the addresses are exchanged; the mesh calls
// Shutdown() when it is destroyed, and requests keep the engine alive after that.
class Engine : public std::enable_shared_from_this<Engine>, public SharedSlots {
 public:
  struct Config {
    ShmOptions options;
    int rank = -1;
    int size = 0;
    uint64_t job_hash = 0;
    std::shared_ptr<Inbox> inbox;
    std::vector<InboxAddress> addresses;  // index = rank
  };

  // Builds the engine and starts its background thread.
  static std::shared_ptr<Engine> Start(Config config);
  ~Engine();

  int rank() const { return rank_; }
  int size() const { return size_; }

  // The shared slots, handed to the first caller only (Mesh::ClaimSharedSlots).
  SharedSlots* ClaimSharedSlots() { return slots_claimed_.exchange(true) ? nullptr : this; }
  absl::Status AttachAll() override ABSL_LOCKS_EXCLUDED(mu_);
  SharedSlot* Slot(int rank, int index) override { return slot_bases_[rank] + index; }
  uint8_t* Buffer(int rank) override {
    return reinterpret_cast<uint8_t*>(slot_bases_[rank]) + kSharedBufferOffset;
  }
  absl::Status PeerStatus(int rank) override ABSL_LOCKS_EXCLUDED(mu_);
  bool MessageWaiting(int rank, Tag tag) override ABSL_LOCKS_EXCLUDED(mu_);
  bool oversubscribed() const override { return waiters_.yields_every_poll(); }

  // The connection to `peer` (in range, not this rank), attached on first use. A peer that
  // cannot be attached gets a connection whose requests fail with the reason.
  Connection* GetConnection(int peer);
  RequestPtr Send(int peer, Tag tag, ConstMemoryRef buffer);
  RequestPtr Recv(int peer, Tag tag, MemoryRef buffer, RecvSink* sink = nullptr);
  // With `claim`, a part of a receive shared with other meshes (Mesh::RecvFromAnyPart).
  RequestPtr RecvFromAny(absl::Span<const int> peers, Tag tag, MemoryRef buffer,
                         std::shared_ptr<ReceiveClaim> claim = nullptr, int part = 0);
  void Abort(absl::string_view reason);
  // Fails what is pending (kAborted), tells the peers, stops the background thread and closes
  // the inbox for new attachments. Idempotent.
  void Shutdown();

  absl::Status Wait(ShmRequest& request, Deadline deadline);
  void Cancel(ShmRequest& request);

 private:
  struct Peer;
  struct Unexpected;
  struct OutboundEvents;
  enum class Claim { kWithdrawn, kTooLong, kRead, kStage };
  using Matching = matching::MatchTable<std::shared_ptr<ShmRequest>, Unexpected>;

  explicit Engine(Config config);

  // --- progress (mu_ held) ---
  void Progress() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScanAttachments() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Connect(Peer& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Connect found `peer` gone: delivers what it sent in full, then fails it with `status`.
  void FailUnreachable(Peer& peer, absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Drain(Peer& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleRecord(Peer& peer, const Record& record, const char* payload)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DeliverEager(Peer& peer, Tag tag, const char* data, uint64_t length)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DeliverAnnouncement(Peer& peer, const Record& record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnChunk(Peer& peer, const Record& record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnFinished(Peer& peer, uint32_t slot_ref, uint64_t outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Flush(Peer& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteControl(Peer& peer, RecordType type, uint32_t slot_ref, uint64_t length = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- matching (mu_ held) ---
  ShmRequest* PeekPosted(Peer& peer, Tag tag) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<ShmRequest> TakePosted(Peer& peer, Tag tag) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes a posted receive off every peer it is posted on (cancelled, withdrawn or failed).
  void Unpost(ShmRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True when `request` may take a message: always, unless it is a part of a shared receive
  // (Mesh::RecvFromAnyPart) whose claim another part won; then it is unposted and completed as
  // withdrawn. `tentative` only holds the claim, for a message that may turn out withdrawn by
  // its sender: SettleClaim then confirms or releases it.
  bool WinClaim(ShmRequest& request, bool tentative) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void SettleClaim(ShmRequest& request, bool taken);
  // Takes the oldest unexpected message with the request's tag from `peer` into `request`;
  // false if there is none (announcements withdrawn by their sender are skipped).
  bool MatchUnexpected(Peer& peer, const std::shared_ptr<ShmRequest>& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Claim ClaimAnnouncement(Peer& peer, uint32_t slot_ref, uint64_t length, uint64_t address,
                          size_t capacity) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Where this process can read the `length` bytes `peer` announced at `address` by itself:
  // at the address for a peer in this process, in this rank's mapping of the peer's arena
  // (AllocateSharedMemory) for a buffer inside it; null otherwise (cross-memory attach or the
  // staging area then).
  const char* InPlace(Peer& peer, uint64_t address, uint64_t length)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes this process's arena into this rank's inbox header, for peers to map (once).
  void PublishArena(const Arena& arena) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReceiveAnnounced(Peer& peer, const std::shared_ptr<ShmRequest>& request, Claim claim,
                        uint32_t slot_ref, uint64_t length, uint64_t address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishEagerReceive(ShmRequest& request, int from, const char* data, uint64_t length)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies an announced message (claimed for reading) out of the sender's buffer into `into`,
  // or hands it to `sink` in one piece where it can be read in place, and tells the sender it
  // is done.
  absl::Status ReadAnnounced(Peer& peer, char* into, RecvSink* sink, uint32_t slot_ref,
                             uint64_t length, uint64_t address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pulls announcements that waited longer than the hold time for a receive into buffers of
  // this rank, so their senders complete.
  void PullExpiredAnnouncements() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A receive matched a message being pulled through staging: it takes over the stream.
  void TakeOverPull(Peer& peer, const std::shared_ptr<ShmRequest>& request,
                    const Unexpected& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A pull finished: its unexpected entry becomes plain data.
  void FinishPulled(Peer& peer, InboundStreams::Stream& stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- completion and failure (mu_ held) ---
  std::shared_ptr<ShmRequest> NewRequest(RequestKind kind, int peer, Tag tag, void* data,
                                         size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives a request that is still in flight after its post an owner in pending_, so that a
  // failure or shutdown completes it even if the caller has dropped it.
  void TrackIfPending(const std::shared_ptr<ShmRequest>& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Complete(ShmRequest& request, absl::Status status, size_t bytes = 0, int from = -1)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Before this side's sends to `peer` fail: waits while a peer in this process copies one of
  // them in place (see engine.cc).
  void AwaitInPlaceReads(const Peer& peer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails everything pending with `peer` and every later request to it. `departed`: the peer
  // destroyed its mesh in good order, which fails a RecvFromAny only once no listed peer is left.
  void FailPeer(Peer& peer, absl::Status status, bool departed = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK while a RecvFromAny on `peers` may still be satisfied; else the error it fails with.
  absl::Status AnyFailure(absl::Span<const int> peers) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails everything with `status`, withdraws announced buffers and marks the inbox closed
  // (`how`: a CloseState) for the peers.
  void CloseWith(absl::Status status, uint32_t how) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes a cancelled send whose receiver was reading its buffer, once it stopped.
  void FinishCancelAfterRead(ShmRequest& request);

  // --- waiting and the background thread (mu_ not held) ---
  void PollOnce() ABSL_LOCKS_EXCLUDED(mu_);
  void BackgroundLoop();
  // Polls the peers' pidfds (and the stop event) for up to `timeout_ms`; fails dead peers.
  void CheckLiveness(int timeout_ms) ABSL_LOCKS_EXCLUDED(mu_);

  const ShmOptions options_;
  const int rank_;
  const int size_;
  const uint64_t job_hash_;
  const std::shared_ptr<Inbox> inbox_;
  InboxHeader& header_;

  // std::mutex rather than absl::Mutex: Debian's libabsl is not built for ThreadSanitizer, so
  // TSan cannot see absl::Mutex's ordering, while it intercepts pthread mutexes.
  std::mutex mu_;
  PeerLiveness liveness_;  // its pidfds guarded by mu_, which it names
  std::vector<Peer> peers_ ABSL_GUARDED_BY(mu_);  // index = rank; this rank's entry unused
  std::vector<int> active_ ABSL_GUARDED_BY(mu_);  // connected, not failed: polled by Progress
  uint64_t seen_attach_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  Matching matching_ ABSL_GUARDED_BY(mu_);
  HoldSchedule held_;  // guarded by mu_, which it names
  // Every request from creation to completion, so Abort and peer failure can reach them.
  absl::flat_hash_map<ShmRequest*, std::shared_ptr<ShmRequest>> pending_ ABSL_GUARDED_BY(mu_);
  absl::Status closed_ ABSL_GUARDED_BY(mu_);  // non-OK once aborted or shut down
  bool arena_published_ ABSL_GUARDED_BY(mu_) = false;

  Waiters waiters_;
  std::atomic<bool> stopping_{false};
  std::thread background_;

  // Each rank's shared slots in this process's mappings: this rank's from the start, the peers'
  // once AttachAll has attached to them (written under mu_ before slots_attached_ is set).
  std::vector<SharedSlot*> slot_bases_;
  std::atomic<bool> slots_attached_{false};
  // Set once a peer has failed or the engine closed: PeerStatus takes no lock while all is well.
  std::atomic<bool> troubled_{false};
  std::atomic<bool> slots_claimed_{false};
};

}  // namespace chorus::shm

#endif  // CHORUS_TRANSPORT_SHM_ENGINE_H_
