// One collective call in progress: the algorithm's only window on the transport. It tags
// messages, exchanges and checks headers, waits with the collective's deadline, and turns
// transport errors into messages that name the collective, its sequence number, the peer and
// what to do.
//
// Header protocol: before its first message to a peer the context sends that peer its
// header, and before data received from a peer is used the context has checked that peer's
// header (so a rank never completes with data from a rank that disagrees with it). The one
// exception is RecvReduce, which combines data into its output as it arrives: a peer that
// disagrees can leave that output (at most the posted length) with meaningless values, but the
// collective still fails before it completes, as the header rule requires. Each rank also
// sends its header to its successor on the header ring (header_ring.h) and checks the one from
// its predecessor before it completes, so that any disagreement is seen by at least one rank
// even when the two sides' communication patterns do not meet. Without shared slots, in a
// small call that brings the rank at the ring's first position nothing from its predecessor,
// that rank checks the predecessor's header of every kHeaderCheckInterval-th call only, in a
// later call (owed_headers.h): the checks along the rest of the ring see every disagreement
// too, and a broadcast root there runs ahead of its peers. Likewise, in such a small call a
// rank whose data comes from a rank at a lower ring position (a tree's parent; the algorithm
// names it through its FeederFn) checks that rank's header with the data instead of its
// predecessor's, and the predecessor, which can tell the same from the same arguments, sends
// none: every rank but the first still matches some rank below it, and so all match the first.
// A rank that disagrees may then wait for data or a header that never comes, so a wait of a
// rank fed from below that has blocked for kHeldHeaderGrace also takes this collective's
// header from its predecessor or any rank a power of two below it on the ring (where every
// feeder sits) that it expects none from: the lowest rank on the ring that disagrees with the
// one before it gets a header either from that rank or from its feeder in the lower ranks'
// view, and finds the disagreement without waiting out its deadline. A disagreement
// breaks the communicator (CommState::Break): the record in the store and the aborted mesh
// make every other rank that is still inside the collective fail promptly with the same
// message.
//
// Piggybacking: when a rank's first message to a peer is small (at most the communicator's
// CommTuning::piggyback_bytes, which its device's links set: 1 KiB, 16 KiB over TCP), it
// travels inside the header message, on the header step, as one transport message:
//   [40-byte header][u64 step][payload]     (a header alone is the 40 bytes)
// The payload is copied into a context-owned buffer when the send is posted. Every header
// receive is posted with room for a header and that limit. A small receive from a peer
// whose header has not been checked yet is deferred: it posts nothing on the transport until
// the header arrives and is checked. Then, in posting order, the first receive from that peer
// for the header's step takes the payload (copied out of the context's buffer, and only if its
// length is the one expected: otherwise, as for any message, a MismatchError), and every other
// deferred receive is posted on the transport. Large receives are posted at once (a large
// receive for the step a payload carries is a length disagreement, a MismatchError).
// Start() owes the ring successor its header rather than sending it, so that it can ride on
// the first data message to that successor; an owed header goes out on its own before this
// rank blocks in any wait (and so before Finish), so no rank waits while its successor lacks
// its header. An algorithm that will send to the successor later in the call (WillSendTo)
// keeps the header for that message instead; it still goes out on its own once a wait has
// blocked for kHeldHeaderGrace (context.cc), so a rank that a disagreement stalls never holds
// it back. Transports see ordinary tagged messages: none of this is theirs to know.
#ifndef CHORUS_COLLECTIVES_ENGINE_CONTEXT_H_
#define CHORUS_COLLECTIVES_ENGINE_CONTEXT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "chorus/collectives/collective_args.h"
#include "chorus/collectives/engine/comm_state.h"
#include "chorus/collectives/engine/header.h"
#include "chorus/collectives/engine/topology.h"
#include "chorus/collectives/reduce/reduce_sink.h"
#include "chorus/collectives/reduce/streaming_sink.h"
#include "chorus/core/deadline.h"
#include "chorus/transport/request.h"

namespace chorus {

// A posted send or receive.
struct Transfer {
  // Owned by the context, so valid while it lives (copying a Transfer touches no reference
  // count); null for a deferred receive (below), whose request is its DeferredRecv's.
  Request* request = nullptr;
  int peer = -1;
  size_t bytes = 0;  // the length sent, or the exact length a receive expects
  uint64_t step = 0;
  bool is_recv = false;
  // A small receive waiting for its peer's header, which may carry its data: an index into
  // the context's deferred receives; -1 otherwise.
  int deferred = -1;
  ReduceSink* reduce = nullptr;  // RecvReduce: the reduction to complete once received
};

// The ring position from which the rank at ring `position` gets its data, with that rank's
// header, in a call rooted at `root_position` of `size` (its parent in a tree); -1 when there
// is none. An algorithm that can say lists it in its table entry. Start() relies on a feeder
// only a power of two below `position`: those positions and the ring predecessor are where a
// rank that expects no header from its predecessor looks for one (see the top of this file).
using FeederFn = int (*)(int position, int root_position, int size);

// Used by the one thread that runs the collective; Cancel() may be called from any thread.
class CollectiveContext {
 public:
  // `start`, when known, is the clock reading `deadline` was computed from: the first wait
  // that blocks uses it instead of reading the clock again.
  CollectiveContext(CommState& comm, const CollectiveArgs& args, const CollectiveHeader& header,
                    Deadline deadline, std::optional<Deadline::Clock::time_point> start = {});
  // Cancels whatever is still pending, so no transport touches the buffers afterwards.
  ~CollectiveContext();
  CollectiveContext(const CollectiveContext&) = delete;
  CollectiveContext& operator=(const CollectiveContext&) = delete;

  // This rank and the rank count: of the communicator, or of the group while a GroupView is
  // active (group-relative; peers passed to Send and Recv are then group-relative too).
  int rank() const { return group_.empty() ? comm_.rank() : group_rank_; }
  int size() const { return group_.empty() ? comm_.size() : static_cast<int>(group_.size()); }
  const CommTuning& tuning() const { return comm_.tuning(); }
  // Which ranks share a host, by communicator rank (never group-relative).
  const Topology& topology() const { return comm_.topology(); }
  const CollectiveHeader& header() const { return header_; }
  const CollectiveArgs& args() const { return args_; }
  CommState& comm() const { return comm_; }
  // When the whole collective must end on this rank.
  Deadline deadline() const { return deadline_; }

  // Expects a header from the ring predecessor and owes one to the successor: it rides on the
  // first small message to that successor, or goes out alone before this rank first waits.
  // `feeder`, for an algorithm that can tell (its table entry's), spares a small call the ring
  // edges that data covers: a rank fed from below expects nothing from its predecessor, and
  // its predecessor sends it nothing (see the top of this file).
  void Start(FeederFn feeder = nullptr);

  // The peers this rank will send to during the call (group ranks under a GroupView). When
  // the ring successor is one of them, the header owed to it waits for that data message
  // instead of going out alone before the first wait (see the top of this file).
  void WillSendTo(absl::Span<const int> peers);

  // Where `rank` (a group rank under a GroupView) sits on the header ring, and the rank at a
  // position (taken modulo size()). Algorithms free to order the ranks (trees, dissemination)
  // number them this way, so that a rank's successor is a peer it sends to anyway. Under a
  // GroupView the group's own order.
  int RingPosition(int rank) const;
  int RankAtRingPosition(int position) const;

  // Post a message of step `step` (numbered by the algorithm from 0). Errors surface in Wait.
  // Under a GroupView, `peer` is a group rank and the view's step base is added to `step`;
  // the returned Transfer, errors and the flight recorder name the communicator rank.
  Transfer Send(int peer, uint64_t step, const void* data, size_t bytes);
  Transfer Recv(int peer, uint64_t step, void* data, size_t bytes);
  // A receive of `bytes` whose data is combined into `out` as (received op own), elementwise
  // in the collective's type and op (`out` may be `own`). Transports that hand data over as it
  // arrives are reduced from directly; others store it in `buffer` (`bytes` long, scratch)
  // first. Wait() returns once the reduction is done; Ready() says nothing about it.
  Transfer RecvReduce(int peer, uint64_t step, void* buffer, size_t bytes, const void* own,
                      void* out);
  // A receive into `data` that nobody reads again soon (a final result too large for the
  // cache): transports that hand data over have it copied past the cache (StreamingSink).
  Transfer RecvStreaming(int peer, uint64_t step, void* data, size_t bytes);

  // Waits until every transfer is done and, for receives, the sender's header is checked.
  absl::Status Wait(const Transfer& transfer) { return WaitAll({&transfer, 1}); }
  absl::Status WaitAll(absl::Span<const Transfer> transfers);

  // True when Wait(transfer) would return at once: done and, for a receive, the sender's
  // header has arrived (a deferred receive: checked, and its data taken or arrived). Never
  // blocks; sends an owed header unless WillSendTo holds it.
  bool Ready(const Transfer& transfer);

  // Waits for every send posted so far and for all expected headers; called once the
  // algorithm has returned OK. Then makes the header check an earlier call left to it
  // (owed_headers.h).
  absl::Status Finish();
  // How often the first rank on the header ring checks its predecessor's header in calls that
  // do not wait for it.
  static constexpr uint32_t kHeaderCheckInterval = 256;

  // The transport messages this rank has posted in the call: data, and headers whether alone
  // or carrying data (diagnostics and tests).
  size_t messages_sent() const { return sends_.size(); }

  // The number of sends posted so far, and a wait for the sends posted since such a count: a
  // phase whose send buffers a later phase overwrites waits for its own sends first (an
  // algorithm may return with sends in flight; Finish waits for them).
  size_t SendsPosted() const { return sends_.size(); }
  absl::Status WaitSendsSince(size_t first);

  // Ends the collective early with kAborted (Work::Abort). Thread-safe.
  void Cancel();

  // A scratch buffer (contents undefined) owned by the context until it ends.
  uint8_t* Scratch(size_t bytes);
  // For a caller that runs an algorithm several times in one context (staging in segments): the
  // scratch taken since MarkScratch() goes back to the communicator's cache at
  // ReleaseScratchSince(mark), which must come only once every transfer posted since the mark
  // has been waited for (none may still write or read it).
  struct ScratchMark {
    size_t buffers = 0;
    bool inline_used = false;
  };
  ScratchMark MarkScratch() const { return {scratch_.size(), inline_scratch_used_}; }
  void ReleaseScratchSince(ScratchMark mark);

  // For algorithms that read their peers' data in shared memory instead of receiving messages
  // (shared_slots.cc), and so check headers and report failures themselves:
  // The communicator's shared slots; null when its mesh has none.
  SharedSlots* shared_slots() const { return comm_.shared_slots(); }
  SlotDebts& slot_debts() { return comm_.slot_debts(); }
  // The call's turn on the slots (slot_turns.h), which its Execute took.
  void set_slot_turn(uint32_t turn) { slot_turn_ = turn; }
  uint32_t slot_turn() const { return slot_turn_; }
  bool IsSlotTurn() { return comm_.slot_turns().IsTurn(slot_turn_); }
  const CollectiveHeader::Wire& header_wire() const { return header_wire_; }
  // The tag of this collective's header message, which a peer that runs it over messages sends.
  Tag header_tag() const;
  // Checks a peer's header in wire form against this rank's; a disagreement breaks the
  // communicator and is returned (as for a header message).
  absl::Status CheckWire(int peer, const uint8_t* wire, size_t bytes);
  // Pays the reads of shared slots the communicator's collectives owe (slot_debts.h); a header
  // check an earlier collective left to later calls that found a disagreement breaks the
  // communicator and is returned. `probe`: also look for a peer owed such a check that ran its
  // collective over messages.
  absl::Status SettleSlotDebts(bool probe = false);
  // A disagreement that a header check left to later calls found: breaks the communicator and
  // is returned, naming this call or the earlier one whose check it was.
  absl::Status ReportSlotDisagreement(const SlotDisagreement& found);
  // `peer` sent this collective's header as a message where this rank expects none: receives
  // and checks it, and returns the disagreement (always an error; breaks the communicator).
  absl::Status CheckHeaderMessage(int peer);
  // Why a wait must stop at once, if it must: the caller aborted (Work::Abort), or the
  // communicator broke.
  std::optional<absl::Status> Interrupted() const;
  // `peer` died or closed its mesh (`status`, from the transport) during `during`: the reason
  // another rank published when it broke the communicator, else this; breaks the communicator.
  absl::Status PeerLost(int peer, const absl::Status& status, absl::string_view during);
  bool cancelled() const;
  // Breaks the communicator with `error` (the first error wins) and returns it.
  absl::Status Fatal(absl::Status error);

  // "allreduce #17 (ring, 1000 x float32 (3.9 KiB), sum) on rank 2".
  std::string Describe() const;

  // For the flight recorder, from any thread: what the collective waited on last and, per
  // peer, the messages posted and completed, naming peers whose header never arrived (they
  // have not entered this collective). Indented lines, each ending in a newline.
  std::string DescribeProgress() const;

 private:
  friend class GroupView;

  // A header message: the header, then optionally the step and payload of a small message.
  // The context holds room for one of kPiggybackBytes; larger ones come from the thread's
  // cache (context.cc).
  static constexpr size_t kStepBytes = sizeof(uint64_t);
  static constexpr size_t kHeaderMessageCapacity =
      CollectiveHeader::kWireSize + kStepBytes + kPiggybackBytes;
  // The room a header receive needs under this communicator's piggyback limit: a peer that
  // disagrees may also have sent data inside its header.
  size_t HeaderMessageCapacity() const {
    return CollectiveHeader::kWireSize + kStepBytes + piggyback_bytes_;
  }
  // The header's bytes in a header message of `length` bytes: the header alone, or the header,
  // a step and a payload.
  static size_t WireBytesIn(size_t length) {
    return length >= CollectiveHeader::kWireSize + kStepBytes ? CollectiveHeader::kWireSize
                                                              : length;
  }

  // A receive posted from a peer before its header was resolved, in posting order.
  struct EarlyRecv {
    uint64_t step;
    size_t bytes;
    int deferred;  // index into deferred_, or -1 for a receive posted on the transport
  };

  struct PeerHeader {
    PeerHeader() {}  // the message buffer is left uninitialised
    int peer = -1;
    Request* request = nullptr;  // owned by requests_
    bool checked = false;        // arrived and agrees with ours
    bool resolved = false;       // checked, and the early receives got their data or were posted
    absl::Status failure;        // a disagreement Resolve found, reported by every later wait
    bool has_payload = false;
    bool payload_taken = false;
    uint64_t payload_step = 0;
    size_t payload_bytes = 0;
    absl::InlinedVector<EarlyRecv, 2> early;
    // Where the header message lands: `inline_message`, or `cached` where the communicator's
    // limit needs more room.
    uint8_t* message = inline_message;
    std::unique_ptr<uint8_t[]> cached;
    uint8_t inline_message[kHeaderMessageCapacity];
  };

  // A small receive waiting for its peer's header. Changed only by the collective's thread,
  // under mu_ (DescribeProgress and Cancel read it from other threads).
  struct DeferredRecv {
    void* data;
    RequestPtr request;  // posted on the transport once the header said the data comes apart
    size_t got = 0;      // the length of the header's payload, once taken
    bool taken = false;  // took the header's payload (copied when `got` is the expected length)
  };

  // Recv, or RecvReduce's / RecvStreaming's receive when `sink` is set (a small receive
  // deferred for its peer's header never uses the sink: its data lands in `data`).
  Transfer RecvInto(int peer, uint64_t step, void* data, size_t bytes, RecvSink* sink);
  Transfer Post(int peer, uint64_t step, size_t bytes, bool is_recv,
                absl::FunctionRef<RequestPtr(Connection&, Tag)> post);
  // Posts a data message's request with `post` on `connection` (a failed one once cancelled
  // or without a connection); mu_ held.
  RequestPtr PostLocked(int peer, uint64_t step, RequestKind kind,
                        const absl::StatusOr<Connection*>& connection,
                        absl::FunctionRef<RequestPtr(Connection&, Tag)> post)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendHeaderTo(int peer);
  // Sends the header with a small message (`bytes` <= piggyback_bytes_) of step `step`.
  Transfer SendHeaderWith(int peer, Connection& connection, uint64_t step, const void* data,
                          size_t bytes);
  // Sends the header owed to the ring successor unless WillSendTo holds it for a data message.
  void FlushOwedHeader();
  // Sends it in any case.
  void SendOwedHeader();
  PeerHeader* ExpectHeaderFrom(int peer);
  // The header expected from `peer`, or null.
  PeerHeader* HeaderOf(int peer) {
    const int index = peer_slots_[peer].header;
    return index < 0 ? nullptr : headers_[index];
  }
  Transfer Defer(int peer, uint64_t step, void* data, size_t bytes);
  // Hands the payload of `header` to deferred receive `index` (copied only if it is `bytes`
  // long and the collective was not cancelled).
  void TakePayload(int index, const PeerHeader& header, size_t bytes);
  void PostDeferred(int index, int peer, uint64_t step, size_t bytes);
  absl::Status Resolve(int peer, PeerHeader& header);
  absl::Status AwaitAll(absl::Span<const Transfer> transfers);
  bool IsDone(const Transfer& transfer) const;
  // The transport request of a posted transfer; null for a deferred receive never posted.
  Request* PostedRequest(const Transfer& transfer) const;
  // Whether a request this context posted is still with its transport. For the running thread
  // alone: it reads without the lock what only that thread writes (Cancel, on any thread,
  // writes none of it), so that a call whose requests all completed ends without one.
  bool AnyPending() const ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Records a posted transfer and takes ownership of its request (`transfer.request`).
  void Register(const Transfer& transfer, RequestPtr request);
  void NoteWait(const Transfer& transfer);
  absl::Status CheckArrivedHeaders();
  // A rank fed from below whose wait has blocked long: a receive of this collective's header
  // from its predecessor or a rank a power of two below it on the ring, whichever it expects
  // none from. In a call that every rank agrees on none sends one; a rank that disagrees may
  // (the predecessor, or a feeder in another view of the call), and CheckHeaderProbe reports
  // the disagreement instead of waiting out the deadline.
  void PostHeaderProbe();
  absl::Status CheckHeaderProbe();
  absl::Status CheckHeader(int peer, PeerHeader& header);
  // Waits for the send of the header across the ring's closing edge (Finish).
  absl::Status AwaitClosingHeader();
  // Receives and checks a header an earlier call left to this one.
  absl::Status CheckOwedHeader(const OwedHeaders::Owed& owed);
  // `peer`'s header in wire form against `mine` (this call's, or an earlier one's, described
  // as `described`): a disagreement breaks the communicator and is returned.
  absl::Status Disagree(const CollectiveHeader& mine, absl::string_view described, int peer,
                        const uint8_t* wire, size_t bytes);
  // "<this call> on rank r: earlier, <mine> on rank r", for a check an earlier call left.
  std::string DescribeEarlier(const CollectiveHeader& mine) const;
  absl::Status Failed(const Transfer& transfer, const absl::Status& status);
  absl::Status WrongLength(const Transfer& transfer, size_t got);
  absl::Status TimedOut(absl::Span<const Transfer> transfers);
  absl::Status Reported(const absl::Status& published, int peer);

  CommState& comm_;
  const CollectiveArgs& args_;
  const CollectiveHeader header_;
  const CollectiveHeader::Wire header_wire_;
  const Deadline deadline_;
  const size_t piggyback_bytes_;  // CommTuning::piggyback_bytes
  // The constructor's `start`, until the first blocking wait uses it as its clock reading.
  std::optional<Deadline::Clock::time_point> first_wait_clock_;
  uint32_t slot_turn_ = 0;
  // The containers below hold what a latency-bound collective needs without a heap
  // allocation (a few transfers, one or two peers, one small scratch buffer); they grow on the
  // heap beyond that.
  struct ScratchBuffer {
    std::unique_ptr<uint8_t[]> data;
    size_t capacity;
  };
  absl::InlinedVector<ScratchBuffer, 1> scratch_;
  // The first Scratch() of at most this many bytes is served from here.
  static constexpr size_t kInlineScratchBytes = 256;
  alignas(64) uint8_t inline_scratch_[kInlineScratchBytes];
  bool inline_scratch_used_ = false;
  struct PeerSlot {
    int header = -1;  // index into headers_ of the header expected from this rank
    bool header_sent = false;
  };
  absl::InlinedVector<PeerSlot, 16> peer_slots_;  // by communicator rank
  int owed_header_ = -1;  // Start(): the ring successor, until the header is sent
  int later_check_ = -1;  // Start(): the ring predecessor whose header a later call may check
  // Start(): the ring successor whose check of this rank's header a later call of its own may
  // make, and the send of that header when it goes alone.
  int closing_header_to_ = -1;
  std::optional<Transfer> closing_header_;
  bool hold_owed_header_ = false;  // WillSendTo: the successor gets data later in the call
  // Start(): this rank's data comes from below, so it expects no header from its predecessor;
  // a wait that blocks for kHeldHeaderGrace then probes its predecessor and the ranks a power
  // of two below it for one (PostHeaderProbe).
  bool fed_from_below_ = false;
  bool probe_posted_ = false;
  bool probe_checked_ = false;
  Request* probe_request_ = nullptr;  // owned by probe_
  uint8_t* probe_message_ = nullptr;  // scratch
  // Headers expected, in the order first expected. Receive buffers stay put: the first lives
  // in the context, the others on the heap.
  absl::InlinedVector<PeerHeader*, 2> headers_;
  PeerHeader first_header_;
  std::vector<std::unique_ptr<PeerHeader>> more_headers_;
  absl::InlinedVector<Transfer, 2> header_recvs_;  // one per entry of headers_, for Finish
  int unresolved_headers_ = 0;
  absl::InlinedVector<Transfer, 4> sends_;
  // Header messages that carry a payload, until the context ends: the first here where it
  // fits, the others from the thread's cache.
  uint8_t first_outgoing_[kHeaderMessageCapacity];
  bool first_outgoing_used_ = false;
  std::vector<std::unique_ptr<uint8_t[]>> more_outgoing_;
  absl::InlinedVector<DeferredRecv, 2> deferred_;
  // RecvReduce's and RecvStreaming's sinks (one per such receive; a deferred small receive
  // leaves its sink unused), each on the heap so it stays put while a transport may still call
  // it (until the destructor's Cancel).
  std::vector<std::unique_ptr<RecvSink>> sinks_;

  // The transfer WaitAll blocked on last (peer, step, direction) packed by NoteWait, so that
  // a dump reads it without a lock; 0 before the first wait.
  std::atomic<uint64_t> last_wait_{0};

  // The active group view: members by group rank (empty: the whole communicator), this
  // rank's place among them, and the base added to every step.
  std::vector<int> group_;
  int group_rank_ = 0;
  uint64_t step_base_ = 0;

  mutable std::mutex mu_;
  // Everything posted, headers included: for Cancel and for DescribeProgress.
  absl::InlinedVector<Transfer, 6> posted_ ABSL_GUARDED_BY(mu_);
  // The requests of posted_ (deferred receives own theirs), kept until the context ends.
  absl::InlinedVector<RequestPtr, 6> requests_ ABSL_GUARDED_BY(mu_);
  RequestPtr probe_ ABSL_GUARDED_BY(mu_);  // PostHeaderProbe's receive
  // Set under mu_, so that a transfer posted under it either sees it or is cancelled by
  // Cancel(); atomic for cancelled(), which takes no lock.
  std::atomic<bool> cancelled_{false};
};

// Runs an algorithm on a subset of the communicator's ranks, unchanged: while the view lives,
// the context's rank() and size() are those of the group, Send and Recv take group ranks, and
// every step is offset by `step_base`, so that phases of one collective (the hierarchical
// algorithm's intra-host and inter-host phases) keep apart on the wire. Headers, errors and
// the flight recorder keep speaking of communicator ranks. Views may nest (the inner one wins
// until it ends). Used by the collective's own thread, like the context.
class GroupView {
 public:
  // `members`: communicator ranks in group order, including this rank.
  GroupView(CollectiveContext& ctx, std::vector<int> members, uint64_t step_base);
  ~GroupView();
  GroupView(const GroupView&) = delete;
  GroupView& operator=(const GroupView&) = delete;

 private:
  CollectiveContext& ctx_;
  std::vector<int> saved_group_;
  int saved_rank_;
  uint64_t saved_base_;
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_ENGINE_CONTEXT_H_
