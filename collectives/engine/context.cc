#include "chorus/collectives/engine/context.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chorus/collectives/diagnostics/trace.h"
#include "chorus/collectives/engine/rank_arithmetic.h"
#include "chorus/collectives/engine/tag.h"
#include "chorus/collectives/shape.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"

namespace chorus {
namespace {

// While waiting on one request the others are re-checked this often, so that a failure
// elsewhere (a mismatched header, a dead peer) is noticed within this time.
constexpr absl::Duration kRescanInterval = absl::Milliseconds(5);

// How long a wait blocks before a header held for a later data message (WillSendTo) goes out
// on its own. A round of a small collective ends well within it, so the header still rides on
// its data; a rank that a disagreement stalls sends it soon enough for its successor to report
// the disagreement.
constexpr absl::Duration kHeldHeaderGrace = absl::Milliseconds(2);

// A wait that lasts longer than this also looks in the store for a failure another rank
// published, every this often (see CommState::PeekFailure).
constexpr absl::Duration kStoreCheckInterval = absl::Milliseconds(250);

// Whether `feeder` names a rank a power of two below `position` on the ring (FeederFn).
bool FedFromBelow(FeederFn feeder, int position, int root_position, int size) {
  const int distance = position - feeder(position, root_position, size);
  return distance > 0 && distance <= position && (distance & (distance - 1)) == 0;
}

// A transfer waited on, packed into one word for CollectiveContext::last_wait_:
// bit 63 set, bit 62 a receive, bits 32..61 the peer, bits 0..31 the step.
uint64_t PackWait(int peer, uint64_t step, bool is_recv) {
  return (uint64_t{1} << 63) | (uint64_t{is_recv} << 62) |
         (static_cast<uint64_t>(peer & 0x3fffffff) << 32) | (step & 0xffffffffu);
}

std::string StepName(uint64_t step) {
  return step == kHeaderStep ? std::string("header") : absl::StrCat(step);
}

// "a receive from rank 2 at step header".
std::string DescribeWait(uint64_t wait) {
  const bool is_recv = (wait >> 62) & 1;
  return absl::StrCat(is_recv ? "a receive from rank " : "a send to rank ",
                      (wait >> 32) & 0x3fffffff, " at step ", StepName(wait & 0xffffffffu));
}

// Header messages with room for kMostPiggybackBytes, kept by each thread between the
// collectives it runs, so that a call takes no heap buffer once its thread has run one like it.
// A few per thread: one per peer that a call's first messages go to or come from.
constexpr size_t kCachedMessageBytes =
    CollectiveHeader::kWireSize + sizeof(uint64_t) + kMostPiggybackBytes;
constexpr size_t kCachedMessagesPerThread = 8;
thread_local std::vector<std::unique_ptr<uint8_t[]>> cached_messages;

std::unique_ptr<uint8_t[]> TakeCachedMessage() {
  if (cached_messages.empty()) return std::unique_ptr<uint8_t[]>(new uint8_t[kCachedMessageBytes]);
  std::unique_ptr<uint8_t[]> buffer = std::move(cached_messages.back());
  cached_messages.pop_back();
  return buffer;
}

void ReturnCachedMessage(std::unique_ptr<uint8_t[]> buffer) {
  if (buffer != nullptr && cached_messages.size() < kCachedMessagesPerThread) {
    cached_messages.push_back(std::move(buffer));
  }
}

const char kSameCallsAdvice[] =
    "every rank must call the same collectives in the same order with the same count, type, "
    "op and root";

// Why `peer`'s header in wire form disagrees with `mine` (described as `mine_described`): a
// MismatchError naming both views; OK when they agree.
absl::Status Disagreement(const CollectiveHeader& mine, absl::string_view mine_described, int peer,
                          const uint8_t* wire, size_t bytes) {
  absl::StatusOr<CollectiveHeader> theirs = CollectiveHeader::Decode(wire, bytes);
  if (!theirs.ok()) {
    return MismatchError(
        absl::StrCat(mine_described, ": rank ", peer, " sent a malformed collective header (",
                     theirs.status().message(), "); is it running a different Chorus version?"),
        peer);
  }
  const std::string differences = mine.Differences(*theirs);
  if (differences.empty()) return absl::OkStatus();
  return MismatchError(absl::StrCat(mine_described, " but rank ", peer, " called ",
                                    theirs->Describe(), " (", differences, "); ", kSameCallsAdvice),
                       peer);
}

}  // namespace

CollectiveContext::CollectiveContext(CommState& comm, const CollectiveArgs& args,
                                     const CollectiveHeader& header, Deadline deadline,
                                     std::optional<Deadline::Clock::time_point> start)
    : comm_(comm),
      args_(args),
      header_(header),
      header_wire_(header.Encode()),
      deadline_(deadline),
      piggyback_bytes_(std::min(comm.tuning().piggyback_bytes, kMostPiggybackBytes)),
      first_wait_clock_(start),
      peer_slots_(comm.size()) {}
CollectiveContext::~CollectiveContext() {
  // A call that posted nothing (on the shared slots), or whose requests have all completed
  // (every call that succeeded, unless it posted a header probe), has nothing to cancel; and
  // nobody calls Cancel once its context ends: its Work has detached.
  if (AnyPending()) Cancel();
  // No transport touches the header messages after Cancel.
  for (PeerHeader* header : headers_) ReturnCachedMessage(std::move(header->cached));
  for (std::unique_ptr<uint8_t[]>& message : more_outgoing_) {
    ReturnCachedMessage(std::move(message));
  }
  for (ScratchBuffer& buffer : scratch_) {
    comm_.ReleaseScratch(std::move(buffer.data), buffer.capacity);
  }
}

std::string CollectiveContext::Describe() const {
  return absl::StrCat(header_.Describe(), " on rank ", comm_.rank());
}

std::string CollectiveContext::DescribeProgress() const {
  // Data messages per peer and direction; headers only say whether the peer has entered.
  struct Direction {
    int posted = 0;
    int done = 0;
    uint64_t bytes_posted = 0;
    uint64_t bytes_done = 0;
    std::optional<uint64_t> first_pending_step;
  };
  struct Peer {
    Direction sends;
    Direction receives;
    bool header_missing = false;
  };
  std::map<int, Peer> peers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Transfer& transfer : posted_) {
      Peer& peer = peers[transfer.peer];
      const bool done = IsDone(transfer);
      if (transfer.step == kHeaderStep) {
        if (transfer.is_recv && !done) peer.header_missing = true;
        continue;
      }
      Direction& direction = transfer.is_recv ? peer.receives : peer.sends;
      ++direction.posted;
      direction.bytes_posted += transfer.bytes;
      if (done) {
        ++direction.done;
        direction.bytes_done += transfer.bytes;
      } else if (!direction.first_pending_step) {
        direction.first_pending_step = transfer.step;
      }
    }
  }
  auto describe = [](absl::string_view what, const Direction& direction) {
    if (direction.posted == 0) return absl::StrCat("no ", what);
    std::string text = absl::StrCat(what, " ", direction.done, "/", direction.posted, " done (",
                                    HumanBytes(direction.bytes_done), " of ",
                                    HumanBytes(direction.bytes_posted), ")");
    if (direction.first_pending_step) {
      absl::StrAppend(&text, ", first pending at step ", *direction.first_pending_step);
    }
    return text;
  };
  std::string text;
  const uint64_t wait = last_wait_.load(std::memory_order_relaxed);
  if (wait != 0) absl::StrAppend(&text, "    last waited on ", DescribeWait(wait), "\n");
  std::vector<int> silent;
  for (const auto& [rank, peer] : peers) {
    absl::StrAppend(&text, "    rank ", rank, ": ");
    if (peer.header_missing) {
      silent.push_back(rank);
      absl::StrAppend(&text, "SILENT, its header never arrived; ");
    }
    absl::StrAppend(&text, describe("sends", peer.sends), "; ", describe("receives", peer.receives),
                    "\n");
  }
  if (!silent.empty()) {
    absl::StrAppend(&text, "    => rank", silent.size() == 1 ? " " : "s ",
                    absl::StrJoin(silent, ", "), silent.size() == 1 ? " has" : " have",
                    " not entered ", header_.Describe(),
                    ": look at what it is doing (stuck in an earlier call, dead, or calling "
                    "something else)\n");
  }
  return text;
}

void CollectiveContext::Register(const Transfer& transfer, RequestPtr request) {
  std::lock_guard<std::mutex> lock(mu_);
  posted_.push_back(transfer);
  if (cancelled_) request->Cancel();
  requests_.push_back(std::move(request));
}

void CollectiveContext::Start(FeederFn feeder) {
  const int size = comm_.size();
  if (size == 1) return;
  const HeaderRing& ring = comm_.header_ring();
  owed_header_ = ring.Next(comm_.rank());
  // Equal neighbours all along the ring less one edge are all equal, so the check across the
  // edge into the first position can be made in a later call, and for every
  // kHeaderCheckInterval-th call only (owed_headers.h): a small call there need not wait for
  // its predecessor. Not where sends complete only once received (the predecessor's header
  // would wait for that later call), not where slots may carry a call (a rank reading slots
  // finds a peer that ran the call over messages by its header message), not for a large
  // call, whose data a root running ahead would leave buffered at its peers, and not where
  // each rank passes only its own counts: both ends of the edge must judge the size alike.
  const int position = ring.PositionOf(comm_.rank());
  const bool small = comm_.shared_slots() == nullptr &&
                     AgreedCounts(args_.kind) != Agreement::kNone &&
                     PayloadBytes(args_, size) <= piggyback_bytes_;
  const bool open = (position == 0 || position == size - 1) && comm_.tuning().eager_sends && small;
  // The edges into ranks whose data comes from below (see the top of context.h); not where
  // slots may carry a call, for the reason above.
  if (feeder != nullptr && small) {
    const int root_position = ring.PositionOf(args_.root);
    fed_from_below_ = FedFromBelow(feeder, position, root_position, size);
    if (FedFromBelow(feeder, Mod(position + 1, size), root_position, size)) owed_header_ = -1;
  }
  if (open && position == 0) {
    later_check_ = ring.Prev(comm_.rank());
  } else if (!fed_from_below_) {
    ExpectHeaderFrom(ring.Prev(comm_.rank()));
  }
  if (open && position == size - 1) {
    if (header_.sequence % kHeaderCheckInterval != 0) {
      owed_header_ = -1;  // it rides on data to the first rank, if any, and goes nowhere else
    } else {
      // The first rank may have finished, and closed its mesh, before this header arrives.
      closing_header_to_ = owed_header_;
    }
  }
}

void CollectiveContext::WillSendTo(absl::Span<const int> peers) {
  for (int peer : peers) {
    if (!group_.empty()) peer = group_[peer];
    if (peer == owed_header_) hold_owed_header_ = true;
  }
}

int CollectiveContext::RingPosition(int rank) const {
  return group_.empty() ? comm_.header_ring().PositionOf(rank) : rank;
}

int CollectiveContext::RankAtRingPosition(int position) const {
  if (group_.empty()) return comm_.header_ring().RankAt(position);
  return Mod(position, size());
}

void CollectiveContext::FlushOwedHeader() {
  if (!hold_owed_header_) SendOwedHeader();
}

void CollectiveContext::SendOwedHeader() {
  if (owed_header_ < 0) return;
  SendHeaderTo(owed_header_);
  owed_header_ = -1;
}

void CollectiveContext::SendHeaderTo(int peer) {
  if (peer_slots_[peer].header_sent) return;
  peer_slots_[peer].header_sent = true;
  const Tag tag = CollectiveTag(comm_.tag_id(), header_.sequence, kHeaderStep);
  absl::StatusOr<Connection*> connection = comm_.GetConnection(peer);
  // Without a connection the data transfers to this peer report the same error.
  if (!connection.ok()) return;
  RequestPtr request = (*connection)->Send(tag, header_wire_.data(), header_wire_.size());
  const Transfer transfer{request.get(), peer, header_wire_.size(), kHeaderStep, false};
  Register(transfer, std::move(request));
  if (peer == closing_header_to_) {
    closing_header_ = transfer;
  } else {
    sends_.push_back(transfer);
  }
}

Transfer CollectiveContext::SendHeaderWith(int peer, Connection& connection, uint64_t step,
                                           const void* data, size_t bytes) {
  const size_t length = CollectiveHeader::kWireSize + kStepBytes + bytes;
  uint8_t* message;
  if (!first_outgoing_used_ && length <= kHeaderMessageCapacity) {
    first_outgoing_used_ = true;
    message = first_outgoing_;
  } else {
    more_outgoing_.push_back(TakeCachedMessage());
    message = more_outgoing_.back().get();
  }
  std::memcpy(message, header_wire_.data(), CollectiveHeader::kWireSize);
  std::memcpy(message + CollectiveHeader::kWireSize, &step, kStepBytes);  // little-endian
  if (bytes != 0) std::memcpy(message + CollectiveHeader::kWireSize + kStepBytes, data, bytes);
  // Progress and errors speak of the data message it carries.
  RequestPtr request = connection.Send(CollectiveTag(comm_.tag_id(), header_.sequence, kHeaderStep),
                                       message, length);
  const Transfer transfer{request.get(), peer, bytes, step, false};
  Register(transfer, std::move(request));
  sends_.push_back(transfer);
  return transfer;
}

CollectiveContext::PeerHeader* CollectiveContext::ExpectHeaderFrom(int peer) {
  if (PeerHeader* header = HeaderOf(peer)) return header;
  absl::StatusOr<Connection*> connection = comm_.GetConnection(peer);
  if (!connection.ok()) return nullptr;
  PeerHeader* slot = &first_header_;
  if (!headers_.empty()) {
    more_headers_.push_back(std::make_unique<PeerHeader>());
    slot = more_headers_.back().get();
  }
  peer_slots_[peer].header = static_cast<int>(headers_.size());
  headers_.push_back(slot);
  PeerHeader& header = *slot;
  header.peer = peer;
  if (piggyback_bytes_ > kPiggybackBytes) {
    header.cached = TakeCachedMessage();
    header.message = header.cached.get();
  }
  RequestPtr request = (*connection)
                           ->Recv(CollectiveTag(comm_.tag_id(), header_.sequence, kHeaderStep),
                                  header.message, HeaderMessageCapacity());
  header.request = request.get();
  const Transfer transfer{header.request, peer, CollectiveHeader::kWireSize, kHeaderStep,
                          /*is_recv=*/true};
  Register(transfer, std::move(request));
  header_recvs_.push_back(transfer);
  ++unresolved_headers_;
  return &header;
}

Transfer CollectiveContext::Send(int peer, uint64_t step, const void* data, size_t bytes) {
  if (!group_.empty()) {
    peer = group_[peer];
    step += step_base_;
  }
  if (!peer_slots_[peer].header_sent && bytes <= piggyback_bytes_) {
    absl::StatusOr<Connection*> connection = comm_.GetConnection(peer);
    if (connection.ok()) {
      peer_slots_[peer].header_sent = true;
      if (owed_header_ == peer) owed_header_ = -1;
      return SendHeaderWith(peer, **connection, step, data, bytes);
    }
  }
  SendHeaderTo(peer);
  if (owed_header_ == peer) owed_header_ = -1;
  Transfer transfer =
      Post(peer, step, bytes, /*is_recv=*/false,
           [&](Connection& connection, Tag tag) { return connection.Send(tag, data, bytes); });
  sends_.push_back(transfer);
  return transfer;
}

Transfer CollectiveContext::Recv(int peer, uint64_t step, void* data, size_t bytes) {
  return RecvInto(peer, step, data, bytes, /*sink=*/nullptr);
}

Transfer CollectiveContext::RecvInto(int peer, uint64_t step, void* data, size_t bytes,
                                     RecvSink* sink) {
  if (!group_.empty()) {
    peer = group_[peer];
    step += step_base_;
  }
  if (PeerHeader* header = ExpectHeaderFrom(peer)) {
    if (!header->resolved) {
      if (bytes <= piggyback_bytes_) {
        Transfer transfer = Defer(peer, step, data, bytes);
        header->early.push_back(EarlyRecv{step, bytes, transfer.deferred});
        return transfer;
      }
      header->early.push_back(EarlyRecv{step, bytes, -1});
    } else if (header->has_payload && !header->payload_taken && header->payload_step == step) {
      // The first receive for the payload's step takes it, whatever its length.
      header->payload_taken = true;
      Transfer transfer = Defer(peer, step, data, bytes);
      TakePayload(transfer.deferred, *header, bytes);
      return transfer;
    }
  }
  return Post(peer, step, bytes, /*is_recv=*/true, [&](Connection& connection, Tag tag) {
    return sink == nullptr ? connection.Recv(tag, data, bytes)
                           : connection.RecvWithSink(tag, MemoryRef{data, bytes}, sink);
  });
}

Transfer CollectiveContext::RecvReduce(int peer, uint64_t step, void* buffer, size_t bytes,
                                       const void* own, void* out) {
  auto sink = std::make_unique<ReduceSink>(args_.type, args_.op, own, out, buffer, bytes);
  Transfer transfer = RecvInto(peer, step, buffer, bytes, sink.get());
  transfer.reduce = sink.get();
  sinks_.push_back(std::move(sink));
  return transfer;
}

Transfer CollectiveContext::RecvStreaming(int peer, uint64_t step, void* data, size_t bytes) {
  sinks_.push_back(std::make_unique<StreamingSink>(data));
  return RecvInto(peer, step, data, bytes, sinks_.back().get());
}

Transfer CollectiveContext::Defer(int peer, uint64_t step, void* data, size_t bytes) {
  Transfer transfer{nullptr, peer, bytes, step, /*is_recv=*/true};
  std::lock_guard<std::mutex> lock(mu_);
  transfer.deferred = static_cast<int>(deferred_.size());
  deferred_.push_back(DeferredRecv{data, nullptr});
  posted_.push_back(transfer);
  return transfer;
}

void CollectiveContext::TakePayload(int index, const PeerHeader& header, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  DeferredRecv& deferred = deferred_[index];
  if (cancelled_) {
    // After Cancel nothing writes into the caller's buffers; Wait reports the abort.
    deferred.request = MakeFailedRequest(RequestKind::kRecv, -1, 0, AbortedError("cancelled"));
    return;
  }
  deferred.taken = true;
  deferred.got = header.payload_bytes;
  if (header.payload_bytes == bytes && bytes != 0) {
    std::memcpy(deferred.data, header.message + CollectiveHeader::kWireSize + kStepBytes, bytes);
  }
}

void CollectiveContext::PostDeferred(int index, int peer, uint64_t step, size_t bytes) {
  void* data = deferred_[index].data;
  const absl::StatusOr<Connection*> connection = comm_.GetConnection(peer);
  std::lock_guard<std::mutex> lock(mu_);
  deferred_[index].request =
      PostLocked(peer, step, RequestKind::kRecv, connection,
                 [&](Connection& to, Tag tag) { return to.Recv(tag, data, bytes); });
}

absl::Status CollectiveContext::Resolve(int peer, PeerHeader& header) {
  for (const EarlyRecv& early : header.early) {
    if (header.has_payload && !header.payload_taken && early.step == header.payload_step) {
      header.payload_taken = true;
      if (early.deferred < 0) {
        // This rank posted a large transport receive for the step whose data the peer sent
        // small, inside its header: the lengths disagree. Kept, so that every later wait (and
        // not only the one that found it) reports it.
        header.failure = WrongLength(Transfer{nullptr, peer, early.bytes, early.step, true},
                                     header.payload_bytes);
        return header.failure;
      }
      TakePayload(early.deferred, header, early.bytes);
    } else if (early.deferred >= 0) {
      PostDeferred(early.deferred, peer, early.step, early.bytes);
    }
  }
  header.early.clear();
  header.resolved = true;
  --unresolved_headers_;
  return absl::OkStatus();
}

Transfer CollectiveContext::Post(int peer, uint64_t step, size_t bytes, bool is_recv,
                                 absl::FunctionRef<RequestPtr(Connection&, Tag)> post) {
  Transfer transfer{nullptr, peer, bytes, step, is_recv};
  const absl::StatusOr<Connection*> connection = comm_.GetConnection(peer);
  std::lock_guard<std::mutex> lock(mu_);
  RequestPtr request =
      PostLocked(peer, step, is_recv ? RequestKind::kRecv : RequestKind::kSend, connection, post);
  transfer.request = request.get();
  posted_.push_back(transfer);
  requests_.push_back(std::move(request));
  return transfer;
}

RequestPtr CollectiveContext::PostLocked(int peer, uint64_t step, RequestKind kind,
                                         const absl::StatusOr<Connection*>& connection,
                                         absl::FunctionRef<RequestPtr(Connection&, Tag)> post) {
  // Posted under the lock Cancel takes: a receive whose message has already arrived is
  // delivered while it is posted, so posting after Cancel returned would write the caller's
  // buffer (or run a sink) after all.
  if (cancelled_) return MakeFailedRequest(kind, peer, 0, AbortedError("cancelled"));
  if (!connection.ok()) return MakeFailedRequest(kind, peer, 0, connection.status());
  // A data step never takes the header's tag, also where an algorithm's step count reaches
  // 0xffff: steps wrap modulo kHeaderStep (tag.h).
  return post(**connection, CollectiveTag(comm_.tag_id(), header_.sequence, step % kHeaderStep));
}

uint8_t* CollectiveContext::Scratch(size_t bytes) {
  if (bytes <= kInlineScratchBytes && !inline_scratch_used_) {
    inline_scratch_used_ = true;
    return inline_scratch_;
  }
  ScratchBuffer buffer;
  buffer.data = comm_.AcquireScratch(bytes, &buffer.capacity);
  scratch_.push_back(std::move(buffer));
  return scratch_.back().data.get();
}

void CollectiveContext::ReleaseScratchSince(ScratchMark mark) {
  while (scratch_.size() > mark.buffers) {
    comm_.ReleaseScratch(std::move(scratch_.back().data), scratch_.back().capacity);
    scratch_.pop_back();
  }
  inline_scratch_used_ = mark.inline_used;
}

void CollectiveContext::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_.store(true, std::memory_order_release);
  // Requests that are done need no cancel (and cancelling one may take a transport lock).
  for (const Transfer& transfer : posted_) {
    Request* request = PostedRequest(transfer);
    if (request != nullptr && !request->IsDone()) request->Cancel();
  }
  if (probe_ != nullptr && !probe_->IsDone()) probe_->Cancel();
}

Request* CollectiveContext::PostedRequest(const Transfer& transfer) const {
  return transfer.deferred >= 0 ? deferred_[transfer.deferred].request.get() : transfer.request;
}

bool CollectiveContext::AnyPending() const {
  for (const Transfer& transfer : posted_) {
    const Request* request = PostedRequest(transfer);
    if (request != nullptr && !request->IsDone()) return true;
  }
  return probe_ != nullptr && !probe_->IsDone();
}

absl::Status CollectiveContext::WaitAll(absl::Span<const Transfer> transfers) {
  FlushOwedHeader();
  return AwaitAll(transfers);
}

absl::Status CollectiveContext::AwaitAll(absl::Span<const Transfer> transfers) {
  // Nothing to wait for and no header that could have arrived (a call on the shared slots, a
  // single rank): no clock, no trace.
  if (transfers.empty() && headers_.empty() && probe_request_ == nullptr) {
    return absl::OkStatus();
  }
  // Read from the clock once per blocking round, never on the way through.
  std::optional<Deadline::Clock::time_point> store_check;
  // When a header held for a later data message goes out on its own, and when a rank fed from
  // below probes for a header it does not expect (kHeldHeaderGrace).
  std::optional<Deadline::Clock::time_point> grace_end;
  // With tracing on, a wait that blocks becomes a "wait" event from its first block to its
  // return, named after the transfer it first blocked on.
  struct TracedWait {
    TraceLog* trace;
    uint64_t wait = 0;
    absl::Time since = absl::InfinitePast();
    ~TracedWait() {
      if (wait == 0) return;
      trace->Add(absl::StrCat("wait ", DescribeWait(wait)), "wait", since, WallNow());
    }
  } traced{comm_.trace()};
  while (true) {
    CHORUS_RETURN_IF_ERROR(CheckArrivedHeaders());
    CHORUS_RETURN_IF_ERROR(CheckHeaderProbe());
    Request* pending = nullptr;
    uint64_t wait = 0;
    for (const Transfer& transfer : transfers) {
      Request* request = transfer.request;
      if (transfer.deferred >= 0) {
        const DeferredRecv& deferred = deferred_[transfer.deferred];
        if (deferred.taken) {  // from a checked header
          if (deferred.got != transfer.bytes) return WrongLength(transfer, deferred.got);
          continue;
        }
        request = deferred.request.get();
        if (request == nullptr) {  // its peer's header has not arrived
          if (pending == nullptr) {
            pending = HeaderOf(transfer.peer)->request;
            wait = PackWait(transfer.peer, transfer.step, transfer.is_recv);
          }
          continue;
        }
      }
      if (!request->IsDone()) {
        if (pending == nullptr) {
          pending = request;
          wait = PackWait(transfer.peer, transfer.step, transfer.is_recv);
        }
        continue;
      }
      const absl::Status status = request->status();
      if (!status.ok()) return Failed(transfer, status);
      // Headers are checked by CheckHeader, which allows for a payload.
      if (!transfer.is_recv || transfer.step == kHeaderStep) continue;
      if (request->bytes() != transfer.bytes) return WrongLength(transfer, request->bytes());
      // Data from a peer counts only once that peer's header has been checked.
      const PeerHeader* header = HeaderOf(transfer.peer);
      if (header != nullptr && !header->checked && pending == nullptr) {
        pending = header->request;
        wait = PackWait(transfer.peer, kHeaderStep, /*is_recv=*/true);
      }
    }
    if (pending == nullptr) {
      // Every transfer is done and its sender's header checked: the data may be used.
      for (const Transfer& transfer : transfers) {
        if (transfer.reduce != nullptr) transfer.reduce->Finish();
      }
      return absl::OkStatus();
    }
    last_wait_.store(wait, std::memory_order_relaxed);
    if (traced.trace != nullptr && traced.wait == 0) {
      traced.wait = wait;
      traced.since = WallNow();
    }
    // The collective's first blocking round reuses the reading its deadline came from (older by
    // the time posting took: at worst its first slice ends at once and the loop reads again).
    const Deadline::Clock::time_point now =
        first_wait_clock_ ? *first_wait_clock_ : Deadline::Clock::now();
    first_wait_clock_.reset();
    if (!store_check) {
      store_check = now + absl::ToChronoNanoseconds(kStoreCheckInterval);
    } else if (now >= *store_check) {
      if (std::optional<absl::Status> published = comm_.PeekFailure()) {
        return Reported(*published, -1);
      }
      store_check = now + absl::ToChronoNanoseconds(kStoreCheckInterval);
    }
    if (now >= deadline_.time_point()) return TimedOut(transfers);
    Deadline::Clock::time_point slice_end = now + absl::ToChronoNanoseconds(kRescanInterval);
    // A header held by WillSendTo goes out alone (unheld ones went out before the wait), and a
    // rank fed from below probes for headers, once this wait has blocked for kHeldHeaderGrace.
    const bool held = owed_header_ >= 0;
    const bool probe = fed_from_below_ && !probe_posted_;
    if (held || probe) {
      // A fresh reading: `now` may be the call's first, from before work such as staging.
      if (!grace_end) {
        grace_end = Deadline::Clock::now() + absl::ToChronoNanoseconds(kHeldHeaderGrace);
      }
      if (now >= *grace_end) {
        if (held) SendOwedHeader();
        if (probe) PostHeaderProbe();
      } else {
        slice_end = std::min(slice_end, *grace_end);
      }
    }
    // The status is read from the requests above; a slice ending is not an error here.
    pending->Wait(deadline_.Min(Deadline::At(slice_end))).IgnoreError();
  }
}

bool CollectiveContext::IsDone(const Transfer& transfer) const {
  if (transfer.deferred < 0) return transfer.request->IsDone();
  const DeferredRecv& deferred = deferred_[transfer.deferred];
  return deferred.taken || (deferred.request != nullptr && deferred.request->IsDone());
}

bool CollectiveContext::Ready(const Transfer& transfer) {
  FlushOwedHeader();
  if (transfer.deferred >= 0) {
    if (!HeaderOf(transfer.peer)->request->IsDone()) return false;
    // Checks the header and hands out its payload; an error is reported again by Wait.
    if (!CheckArrivedHeaders().ok()) return true;
    return IsDone(transfer);
  }
  if (!transfer.request->IsDone()) return false;
  if (!transfer.is_recv) return true;
  const PeerHeader* header = HeaderOf(transfer.peer);
  return header == nullptr || header->request->IsDone();
}

absl::Status CollectiveContext::Finish() {
  SendOwedHeader();
  CHORUS_RETURN_IF_ERROR(AwaitAll(sends_));
  CHORUS_RETURN_IF_ERROR(AwaitAll(header_recvs_));
  if (closing_header_) CHORUS_RETURN_IF_ERROR(AwaitClosingHeader());
  // Data from the predecessor brought its header, checked above; otherwise every
  // kHeaderCheckInterval-th call owes its check and makes the one owed before.
  if (later_check_ < 0 || HeaderOf(later_check_) != nullptr ||
      header_.sequence % kHeaderCheckInterval != 0) {
    return absl::OkStatus();
  }
  const std::optional<OwedHeaders::Owed> before =
      comm_.owed_headers().Exchange({later_check_, header_.sequence, header_wire_});
  return before ? CheckOwedHeader(*before) : absl::OkStatus();
}

absl::Status CollectiveContext::AwaitClosingHeader() {
  // Only its receiver needs the header across the ring's closing edge, in a later call: once
  // that rank has finished and closed its mesh, the send fails, and that is no error here. A
  // send still stuck at the deadline is, unless a rank reported a failure meanwhile: a receiver
  // that left before this rank first reached it refuses the connection until the deadline.
  Request& send = *closing_header_->request;
  while (true) {
    send.Wait(deadline_.Min(Deadline::After(kStoreCheckInterval))).IgnoreError();
    if (send.IsDone()) return absl::OkStatus();  // sent, or failed: no error here
    if (std::optional<absl::Status> published = comm_.PeekFailure()) {
      return Reported(*published, closing_header_to_);
    }
    if (deadline_.Expired()) return TimedOut({&*closing_header_, 1});
  }
}

absl::Status CollectiveContext::CheckOwedHeader(const OwedHeaders::Owed& owed) {
  const CollectiveHeader mine =
      CollectiveHeader::Decode(owed.mine.data(), owed.mine.size()).value();
  absl::StatusOr<Connection*> connection = comm_.GetConnection(owed.peer);
  if (!connection.ok()) {
    return PeerLost(owed.peer, connection.status(),
                    absl::StrCat("the check of ", DescribeEarlier(mine)));
  }
  const size_t capacity = HeaderMessageCapacity();
  uint8_t* message = Scratch(capacity);
  RequestPtr request =
      (*connection)
          ->Recv(CollectiveTag(comm_.tag_id(), owed.sequence, kHeaderStep), message, capacity);
  const Transfer transfer{request.get(), owed.peer, CollectiveHeader::kWireSize, kHeaderStep,
                          /*is_recv=*/true};
  Register(transfer, std::move(request));
  const absl::Status received = AwaitAll({&transfer, 1});
  if (GetErrorKind(received) == ErrorKind::kDeadlineExceeded) {
    return MakeError(ErrorKind::kDeadlineExceeded,
                     absl::StrCat(received.message(), " (its header of ", mine.Describe(),
                                  ": this rank runs fewer than ", 2 * kHeaderCheckInterval,
                                  " calls ahead of the rank before it on the header ring)"),
                     ErrorPeerRank(received).value_or(owed.peer));
  }
  CHORUS_RETURN_IF_ERROR(received);
  const size_t bytes = WireBytesIn(transfer.request->bytes());
  if (SameWire(owed.mine, message, bytes)) return absl::OkStatus();
  return Disagree(mine, DescribeEarlier(mine), owed.peer, message, bytes);
}

absl::Status CollectiveContext::WaitSendsSince(size_t first) {
  SendOwedHeader();
  if (first >= sends_.size()) return absl::OkStatus();
  return AwaitAll(absl::MakeConstSpan(sends_).subspan(first));
}

void CollectiveContext::PostHeaderProbe() {
  probe_posted_ = true;
  const HeaderRing& ring = comm_.header_ring();
  const int position = ring.PositionOf(comm_.rank());
  absl::InlinedVector<int, 16> peers;  // the predecessor first: a distance of 1
  for (int distance = 1; distance <= position; distance *= 2) {
    const int peer = ring.RankAt(position - distance);
    if (HeaderOf(peer) == nullptr) peers.push_back(peer);
  }
  if (peers.empty()) return;
  const size_t capacity = HeaderMessageCapacity();
  probe_message_ = Scratch(capacity);
  RequestPtr request =
      comm_.mesh().RecvFromAny(peers, CollectiveTag(comm_.tag_id(), header_.sequence, kHeaderStep),
                               MemoryRef{probe_message_, capacity});
  probe_request_ = request.get();
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_) request->Cancel();
  probe_ = std::move(request);
}

absl::Status CollectiveContext::CheckHeaderProbe() {
  if (probe_request_ == nullptr || probe_checked_ || !probe_request_->IsDone()) {
    return absl::OkStatus();
  }
  probe_checked_ = true;
  // A probe that failed found nothing: the mesh was aborted or the peer lost, which the
  // transfers this rank waits for report themselves.
  if (!probe_request_->status().ok()) return absl::OkStatus();
  return CheckWire(probe_request_->peer(), probe_message_, WireBytesIn(probe_request_->bytes()));
}

absl::Status CollectiveContext::CheckArrivedHeaders() {
  if (unresolved_headers_ == 0) return absl::OkStatus();
  for (PeerHeader* header : headers_) {
    if (!header->failure.ok()) return header->failure;
    if (header->resolved || !header->request->IsDone()) continue;
    if (!header->checked) CHORUS_RETURN_IF_ERROR(CheckHeader(header->peer, *header));
    CHORUS_RETURN_IF_ERROR(Resolve(header->peer, *header));
  }
  return absl::OkStatus();
}

absl::Status CollectiveContext::CheckHeader(int peer, PeerHeader& header) {
  const absl::Status status = header.request->status();
  if (!status.ok()) {
    return Failed(Transfer{header.request, peer, CollectiveHeader::kWireSize, kHeaderStep, true},
                  status);
  }
  const size_t length = header.request->bytes();
  const bool with_payload = length >= CollectiveHeader::kWireSize + kStepBytes;
  CHORUS_RETURN_IF_ERROR(CheckWire(peer, header.message, WireBytesIn(length)));
  header.checked = true;
  if (with_payload) {
    header.has_payload = true;
    std::memcpy(&header.payload_step, header.message + CollectiveHeader::kWireSize, kStepBytes);
    header.payload_bytes = length - CollectiveHeader::kWireSize - kStepBytes;
  }
  return absl::OkStatus();
}

absl::Status CollectiveContext::Reported(const absl::Status& published, int peer) {
  return Fatal(MakeError(
      GetErrorKind(published),
      absl::StrCat(Describe(), " failed because another rank reported: ", published.message()),
      ErrorPeerRank(published).value_or(peer)));
}

absl::Status CollectiveContext::CheckWire(int peer, const uint8_t* wire, size_t bytes) {
  if (SameWire(header_wire_, wire, bytes)) return absl::OkStatus();
  return Disagree(header_, Describe(), peer, wire, bytes);
}

absl::Status CollectiveContext::Disagree(const CollectiveHeader& mine, absl::string_view described,
                                         int peer, const uint8_t* wire, size_t bytes) {
  const absl::Status disagreement = Disagreement(mine, described, peer, wire, bytes);
  return disagreement.ok() ? disagreement : Fatal(disagreement);
}

std::string CollectiveContext::DescribeEarlier(const CollectiveHeader& mine) const {
  return absl::StrCat(Describe(), ": earlier, ", mine.Describe(), " on rank ", comm_.rank());
}

absl::Status CollectiveContext::SettleSlotDebts(bool probe) {
  SharedSlots* slots = shared_slots();
  if (slots == nullptr) return absl::OkStatus();
  const std::optional<SlotDisagreement> found = comm_.slot_debts().SettleOrProbe(*slots, probe);
  return found ? ReportSlotDisagreement(*found) : absl::OkStatus();
}

absl::Status CollectiveContext::ReportSlotDisagreement(const SlotDisagreement& found) {
  const CollectiveHeader mine =
      CollectiveHeader::Decode(found.mine.data(), found.mine.size()).value();
  // This call's own check, made as it ends, or an earlier call's.
  const std::string described =
      mine.sequence == header_.sequence ? Describe() : DescribeEarlier(mine);
  if (found.over_messages) {
    return Fatal(MismatchError(
        absl::StrCat(described, " ran on the shared slots but rank ", found.peer,
                     " called it with arguments that chose messages; ", kSameCallsAdvice),
        found.peer));
  }
  return Disagree(mine, described, found.peer, found.theirs.data(), found.theirs_bytes);
}

absl::Status CollectiveContext::CheckHeaderMessage(int peer) {
  PeerHeader* header = ExpectHeaderFrom(peer);
  if (header == nullptr) {
    return Fatal(MismatchError(absl::StrCat(Describe(), ": rank ", peer,
                                            " sent its header as a message; ", kSameCallsAdvice),
                               peer));
  }
  const Transfer transfer{header->request, peer, CollectiveHeader::kWireSize, kHeaderStep,
                          /*is_recv=*/true};
  const absl::Status received = header->request->Wait(deadline_);
  if (!received.ok()) return Failed(transfer, received);
  // Its header names another algorithm at least (a call on the slots sends none), so this
  // reports the disagreement; the error below is for a peer that forged an agreeing one.
  CHORUS_RETURN_IF_ERROR(CheckHeader(peer, *header));
  return Fatal(MismatchError(
      absl::StrCat(Describe(), " but rank ", peer, " called it with messages; ", kSameCallsAdvice),
      peer));
}

Tag CollectiveContext::header_tag() const {
  return CollectiveTag(comm_.tag_id(), header_.sequence, kHeaderStep);
}

bool CollectiveContext::cancelled() const { return cancelled_.load(std::memory_order_acquire); }

std::optional<absl::Status> CollectiveContext::Interrupted() const {
  if (cancelled()) {
    return AbortedError(absl::StrCat(Describe(), ": aborted by the caller (Work::Abort)"));
  }
  const absl::Status broken = comm_.broken();
  if (!broken.ok()) {
    return MakeError(GetErrorKind(broken),
                     absl::StrCat(Describe(), ": the communicator is broken: ", broken.message()),
                     ErrorPeerRank(broken).value_or(-1));
  }
  return std::nullopt;
}

absl::Status CollectiveContext::PeerLost(int peer, const absl::Status& status,
                                         absl::string_view during) {
  // Another rank may have broken the communicator on purpose; report its reason.
  if (std::optional<absl::Status> published = comm_.PublishedFailure()) {
    return Reported(*published, peer);
  }
  return Fatal(PeerUnavailableError(
      absl::StrCat(Describe(), ": rank ", peer, " closed its connection or died during ", during,
                   " (", status.message(), "); check rank ", peer, "'s log"),
      peer));
}

absl::Status CollectiveContext::Fatal(absl::Status error) {
  comm_.Break(error);
  return error;
}

absl::Status CollectiveContext::Failed(const Transfer& transfer, const absl::Status& status) {
  const int peer = transfer.peer;
  if (std::optional<absl::Status> interrupted = Interrupted()) return *interrupted;
  const ErrorKind kind = GetErrorKind(status);
  if (kind == ErrorKind::kInvalidArgument && transfer.is_recv) {
    // A longer message than expected: most likely the peer runs a different collective.
    PeerHeader* header = HeaderOf(peer);
    if (header != nullptr && !header->checked && header->request->Wait(deadline_).ok()) {
      CHORUS_RETURN_IF_ERROR(CheckHeader(peer, *header));
    }
    return Fatal(
        MismatchError(absl::StrCat(Describe(), ": rank ", peer, " sent a longer message than the ",
                                   transfer.bytes, " bytes expected at step ", transfer.step, " (",
                                   status.message(), "); ", kSameCallsAdvice),
                      peer));
  }
  if (kind == ErrorKind::kPeerUnavailable || kind == ErrorKind::kAborted) {
    return PeerLost(peer, status,
                    absl::StrCat(transfer.is_recv ? "a receive" : "a send", " at step ",
                                 StepName(transfer.step)));
  }
  if (kind == ErrorKind::kDeadlineExceeded) return TimedOut({&transfer, 1});
  return Fatal(MakeError(
      kind, absl::StrCat(Describe(), ": transfer with rank ", peer, " failed: ", status.message()),
      peer));
}

absl::Status CollectiveContext::WrongLength(const Transfer& transfer, size_t got) {
  PeerHeader* header = HeaderOf(transfer.peer);
  if (header != nullptr && !header->checked && header->request->Wait(deadline_).ok()) {
    CHORUS_RETURN_IF_ERROR(CheckHeader(transfer.peer, *header));
  }
  return Fatal(MismatchError(
      absl::StrCat(Describe(), ": rank ", transfer.peer, " sent ", got, " bytes at step ",
                   transfer.step, " where ", transfer.bytes, " were expected; ", kSameCallsAdvice),
      transfer.peer));
}

absl::Status CollectiveContext::TimedOut(absl::Span<const Transfer> transfers) {
  std::vector<std::string> waiting;
  for (const Transfer& transfer : transfers) {
    if (IsDone(transfer)) continue;
    waiting.push_back(
        absl::StrCat(transfer.is_recv ? "a receive from rank " : "a send to rank ", transfer.peer,
                     transfer.step == kHeaderStep ? std::string(" (header)")
                                                  : absl::StrCat(" (step ", transfer.step, ")")));
  }
  for (const PeerHeader* header : headers_) {
    if (!header->request->IsDone()) {
      waiting.push_back(absl::StrCat("the header of rank ", header->peer));
    }
  }
  int first_peer = -1;
  for (const Transfer& transfer : transfers) {
    if (!IsDone(transfer)) {
      first_peer = transfer.peer;
      break;
    }
  }
  return DeadlineExceededError(
      absl::StrCat(Describe(), ": did not finish before its deadline; still waiting for ",
                   waiting.empty() ? std::string("nothing") : absl::StrJoin(waiting, ", "),
                   ". Those ranks may be stuck in an earlier collective, dead, or calling a "
                   "different collective; check their logs"),
      first_peer);
}

GroupView::GroupView(CollectiveContext& ctx, std::vector<int> members, uint64_t step_base)
    : ctx_(ctx),
      saved_group_(std::move(ctx.group_)),
      saved_rank_(ctx.group_rank_),
      saved_base_(ctx.step_base_) {
  const int self = ctx.comm_.rank();
  ctx.group_rank_ = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == self) ctx.group_rank_ = static_cast<int>(i);
  }
  ctx.group_ = std::move(members);
  ctx.step_base_ = step_base;
}

GroupView::~GroupView() {
  ctx_.group_ = std::move(saved_group_);
  ctx_.group_rank_ = saved_rank_;
  ctx_.step_base_ = saved_base_;
}

}  // namespace chorus
