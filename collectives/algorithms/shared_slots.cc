// Allreduce, broadcast and barrier between ranks that share memory, through the mesh's shared
// slots (transport/shared_slots.h) instead of messages: one store of the data and a few loads of
// the peers' cache lines, with no request, lock or system call on the way.
//
//   1. Each rank takes its slot for this collective (the sequence number modulo the depth),
//      once every peer that read its previous contents is done, and writes its header and its
//      data there: the input for an allreduce, the root's data for a broadcast, none for a
//      barrier or a broadcast's other ranks. It stamps the slot last.
//   2. Each rank reads, in place, the slots it needs: every peer's for an allreduce or a
//      barrier, the root's for a broadcast, and always its predecessor's on the header ring
//      (engine/header_ring.h), as on the message path, so that any disagreement is seen by
//      some rank. It checks
//      each header against its own before it uses the data (a disagreement breaks the
//      communicator, as on messages), takes what it needs and counts itself a reader. The root
//      of a broadcast in a slot, which reads no data, checks its predecessor's header only if it
//      is there already and otherwise leaves the check to its later calls
//      (SlotDebts::OweCheck): its part ends once its data is out, so it runs ahead of the
//      ranks that read it.
//   3. An allreduce combines the inputs in rank order, so every rank computes the same bits.
//
// A broadcast or allreduce larger than a slot (up to kSharedBufferPayloadBytes, half the buffer)
// puts its data in the rank's shared buffer instead: in one half of it, once the readers of the
// calls that last used that half are done (so a rank fills one half while its peers still read
// the other), or, for an allreduce of more than a quarter of the buffer, in the whole buffer
// once every reader is done (TakeBufferRegion says why); the other ranks of a broadcast copy
// the root's. An allreduce splits the reduction: each rank puts in its buffer the pieces of its
// input that its peers reduce, reduces its own piece from its own input and the peers' buffers,
// in rank order, into that piece of its buffer (no peer reads it there before) and its output,
// and stamps its slot's `done`; then each copies the other pieces from their owners' buffers.
// Every element is combined once, by one rank, so every rank holds the same bits, and the data
// crosses between cores twice, with two waits for all peers in place of the 2 log2 p rounds of
// messages.
//
// A rank that waits polls the slots, yielding the core as the transport advises and napping
// once polling has not paid; it checks the deadline, a cancellation, the communicator, the
// peers' health and whether a peer runs this collective over messages instead (its arguments
// differ, so it chose another algorithm) every few polls.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "chorus/collectives/algorithms/algorithms.h"
#include "chorus/collectives/algorithms/blocks.h"
#include "chorus/collectives/engine/lazy_context.h"
#include "chorus/collectives/reduce/reduce_kernels.h"
#include "chorus/core/status.h"
#include "chorus/transport/poll_window.h"

namespace chorus {
namespace {

static_assert(SharedSlot::kCapacity >= CollectiveHeader::kWireSize + kSharedSlotPayloadBytes,
              "a slot holds a header and the largest payload");
static_assert(kSharedBufferPayloadBytes <= UINT32_MAX - CollectiveHeader::kWireSize,
              "a slot's byte count holds the largest payload in a buffer");

// The pieces of a reduction split across the ranks start on a cache line of their own, so that
// one rank writing its piece never takes a line that another reads; and each piece is reduced
// in blocks that stay in the first-level cache while every peer's input is added to them.
constexpr size_t kPieceAlignBytes = 64;
constexpr size_t kReduceBlockBytes = 16 * 1024;
// Marks a slot's `done` when its owner gave up on a buffered call (its deadline, an abort)
// before it had reduced its piece, so that the peers waiting for that piece fail at once. It is
// the point-to-point bit, which no collective's header tag has (tag.h).
constexpr uint64_t kGaveUpBit = uint64_t{1} << 47;
// A slot's byte count beyond which its call's data is in the buffer.
constexpr size_t kLargestSlotBytes = CollectiveHeader::kWireSize + kSharedSlotPayloadBytes;

// Between looks at the clock, cancellation, the communicator and the peers' health.
constexpr int kPollsPerCheck = 32;
// How long a waiter polls before it naps, and the longest nap: a peer that arrives late is
// found within a nap, and a long wait costs its core little.
constexpr absl::Duration kSpin = absl::Microseconds(50);
constexpr auto kLongestNap = std::chrono::microseconds(500);
// How long a waiter waits before it looks for a peer's header message (the peer runs this
// collective over messages), and how often it looks again.
constexpr auto kProbeAfter = std::chrono::milliseconds(1);

using Clock = std::chrono::steady_clock;
// Peers of one call: no heap allocation up to 16 ranks.
using Ranks = absl::InlinedVector<int, 16>;

// One rank's part of one collective on the slots.
class SlotCall {
 public:
  // `sources`: the peers whose slots this rank reads (it is counted as one of their readers);
  // `bytes`: the data each rank publishes (beyond kSharedSlotPayloadBytes, in its buffer).
  SlotCall(LazyContext& ctx, SharedSlots& slots, Ranks sources, size_t bytes)
      : ctx_(ctx),
        slots_(slots),
        p_(ctx.size()),
        r_(ctx.rank()),
        index_(static_cast<int>(ctx.header().sequence % SharedSlots::kDepth)),
        // The header's tag names the communicator and the collective, and is never 0.
        stamp_(ctx.header_tag()),
        oversubscribed_(slots.oversubscribed()),
        buffered_(bytes > kSharedSlotPayloadBytes),
        two_step_(buffered_ && ctx.header().kind == CollectiveKind::kAllReduce),
        unread_(std::move(sources)) {}
  // Counts this rank a reader of every slot it read, now that it has copied what it needs, and
  // leaves the reads it owes (it ended early) to later collectives (SlotDebts).
  ~SlotCall() {
    if (published_ && two_step_ && !done_) {
      slots_.Slot(r_, index_)->done.store(stamp_ | kGaveUpBit, std::memory_order_release);
    }
    for (int peer : read_) slots_.Slot(peer, index_)->CountRead();
    if (!attached_ || unread_.empty()) return;  // unattached: the communicator is broken
    for (int peer : unread_) ctx_.slot_debts().Owe(peer, index_, stamp_);
    // A disagreement it finds is kept for the next call to report.
    ctx_.slot_debts().Settle(slots_);
  }
  SlotCall(const SlotCall&) = delete;
  SlotCall& operator=(const SlotCall&) = delete;

  // Maps every peer's slots (the transport's error when it cannot). A call that never attaches
  // owes nothing: it could never have read a slot.
  absl::Status Attach() {
    CHORUS_RETURN_IF_ERROR(slots_.AttachAll());
    attached_ = true;
    return absl::OkStatus();
  }

  // Step 1: this rank's slot, once free, holding its header and `bytes` of `data` (in this
  // rank's buffer when the call is buffered), for `readers` peers. A buffered call leaves the
  // `unread_bytes` at `unread_offset` out of the buffer: data no peer reads there (a buffered
  // allreduce's own piece, which only this rank reduces).
  absl::Status Publish(const void* data, size_t bytes, uint32_t readers, size_t unread_offset = 0,
                       size_t unread_bytes = 0) {
    if (const absl::Status attached = Attach(); !attached.ok()) {
      if (std::optional<absl::Status> interrupted = ctx_.Interrupted()) return *interrupted;
      return ctx_.get().PeerLost(ErrorPeerRank(attached).value_or(-1), attached,
                                 "the attachment to its shared slots");
    }
    // What earlier calls owe, paid before this one waits for anything.
    CHORUS_RETURN_IF_ERROR(ctx_.SettleSlotDebts());
    CHORUS_RETURN_IF_ERROR(WaitUntil([&] { return ctx_.IsSlotTurn(); }, -1,
                                     "this rank's earlier calls on the shared slots"));
    SharedSlot& own = *slots_.Slot(r_, index_);
    CHORUS_RETURN_IF_ERROR(
        WaitUntil([&] { return own.read.load(std::memory_order_acquire) >= own.readers; }, -1,
                  "its peers to finish reading this rank's slot of an earlier collective"));
    // A buffered call's rank that publishes no data (a broadcast's other ranks) leaves its
    // buffer alone.
    const bool fills_buffer = buffered_ && bytes > 0;
    uint32_t buffer_offset = 0;
    if (fills_buffer) {
      CHORUS_ASSIGN_OR_RETURN(buffer_offset, TakeBufferRegion(bytes));
    }
    // The lines no peer polls first, then the first line's fields together, the stamp last: a
    // peer polling the stamp takes that line from this core, and each later store to it would
    // take it back.
    own.read.store(0, std::memory_order_relaxed);
    own.buffer_offset = buffer_offset;
    if (fills_buffer) {
      const uint8_t* from = static_cast<const uint8_t*>(data);
      const size_t rest = unread_offset + unread_bytes;
      std::memcpy(Data(r_), from, unread_offset);
      std::memcpy(Data(r_) + rest, from + rest, bytes - rest);
    }
    std::memcpy(own.data, ctx_.header_wire().data(), CollectiveHeader::kWireSize);
    if (bytes > 0 && !buffered_) std::memcpy(Data(r_), data, bytes);
    own.bytes = static_cast<uint32_t>(CollectiveHeader::kWireSize + bytes);
    own.readers = readers;
    own.stamp.store(stamp_, std::memory_order_release);
    published_ = true;
    return absl::OkStatus();
  }

  // Where `rank` puts its data for this call: its slot, or its buffer.
  uint8_t* Data(int rank) {
    SharedSlot& slot = *slots_.Slot(rank, index_);
    return buffered_ ? slots_.Buffer(rank) + slot.buffer_offset
                     : slot.data + CollectiveHeader::kWireSize;
  }
  // The data this rank published.
  uint8_t* Own() { return Data(r_); }
  // Whether the data rides in the ranks' buffers.
  bool buffered() const { return buffered_; }

  // A buffered call's second step: this rank's part of the result is in its buffer.
  void MarkDone() {
    slots_.Slot(r_, index_)->done.store(stamp_, std::memory_order_release);
    done_ = true;
  }
  // Waits until `peer` has marked its part of the result in its buffer; an error if it gave up
  // on the call first.
  absl::Status WaitDone(int peer) {
    const SharedSlot& slot = *slots_.Slot(peer, index_);
    auto marked = [&] {
      const uint64_t done = slot.done.load(std::memory_order_acquire);
      return done == stamp_ || done == (stamp_ | kGaveUpBit);
    };
    CHORUS_RETURN_IF_ERROR(WaitUntil(marked, peer, "reduced piece of this collective"));
    if (slot.done.load(std::memory_order_acquire) == stamp_) return absl::OkStatus();
    return AbortedError(
        absl::StrCat(ctx_.Describe(), ": rank ", peer,
                     " gave up on this collective (its deadline passed or it was aborted) before "
                     "it had reduced its piece of the result; see that rank's error, then run the "
                     "collective again on every rank"),
        peer);
  }

  // Step 2: `peer`'s slot for this collective, once written, its header checked and holding
  // `bytes` of data, which stay valid while this call lives.
  absl::StatusOr<const uint8_t*> Read(int peer, size_t bytes) {
    const SharedSlot& slot = *slots_.Slot(peer, index_);
    CHORUS_RETURN_IF_ERROR(
        WaitUntil([&] { return slot.stamp.load(std::memory_order_acquire) == stamp_; }, peer,
                  "shared slot for this collective"));
    Unlist(peer);
    read_.push_back(peer);
    const size_t length = slot.bytes;
    CHORUS_RETURN_IF_ERROR(
        ctx_.CheckWire(peer, slot.data, std::min(length, CollectiveHeader::kWireSize)));
    if (length != CollectiveHeader::kWireSize + bytes) {
      // Equal headers promise equal sizes: a peer of another build, or a corrupt slot.
      return ctx_.get().Fatal(
          MismatchError(absl::StrCat(ctx_.Describe(), ": rank ", peer, "'s shared slot holds ",
                                     length, " bytes where ", CollectiveHeader::kWireSize + bytes,
                                     " were expected; is it running a different Chorus version?"),
                        peer));
    }
    return Data(peer);
  }

  // Checks `peer`'s header (of which this rank reads nothing else) now if the peer has
  // published it, else leaves the check to later calls (SlotDebts::OweCheck) rather than wait.
  absl::Status CheckNowOrLater(int peer) {
    if (slots_.Slot(peer, index_)->stamp.load(std::memory_order_acquire) == stamp_) {
      return Read(peer, 0).status();
    }
    Unlist(peer);
    ctx_.slot_debts().OweCheck(peer, index_, stamp_, ctx_.header_wire());
    return absl::OkStatus();
  }

  int Predecessor() const { return ctx_.RingPredecessor(); }

 private:
  // Takes `peer` off the slots still to read (order among them does not matter).
  void Unlist(int peer) {
    const auto it = std::find(unread_.begin(), unread_.end(), peer);
    if (it == unread_.end()) return;
    *it = unread_.back();
    unread_.pop_back();
  }

  // Where in this rank's buffer `bytes` of data go, once the peers have read what this rank's
  // earlier calls put there: one half of it, so that a broadcast's root fills one half while
  // its readers still copy the other (2 ranks, 4 MiB: 2.1x faster than waiting for them), or,
  // for an allreduce of more than a quarter of it, the whole buffer. An allreduce's ranks wait
  // for each other twice a call, so a half gained it nothing on 2 ranks at 4 MiB, and with more
  // ranks than cores a rank filling one half while its peers still reduced from the other
  // measured slower (4 and 8 ranks on 2 cores, 1.1x). Each of this rank's slots that still
  // holds a call with its data in the buffer says where it lies and counts its readers. (A
  // slot a later call took was read before it was taken.) The rank's calls take turns, so the
  // slots' fields are this rank's own writes.
  absl::StatusOr<uint32_t> TakeBufferRegion(size_t bytes) {
    constexpr size_t kHalf = SharedSlots::kBufferBytes / 2;
    const bool whole = two_step_ && bytes > kHalf / 2;
    const size_t length = whole ? SharedSlots::kBufferBytes : kHalf;
    auto in_use = [&](size_t start) {
      for (int index = 0; index < SharedSlots::kDepth; ++index) {
        const SharedSlot& slot = *slots_.Slot(r_, index);
        if (slot.bytes <= kLargestSlotBytes ||
            slot.read.load(std::memory_order_acquire) >= slot.readers) {
          continue;
        }
        const size_t used = slot.bytes - CollectiveHeader::kWireSize;
        if (slot.buffer_offset < start + length && start < slot.buffer_offset + used) return true;
      }
      return false;
    };
    uint32_t region = 0;
    CHORUS_RETURN_IF_ERROR(WaitUntil(
        [&] {
          for (size_t start = 0; start + length <= SharedSlots::kBufferBytes; start += length) {
            if (!in_use(start)) {
              region = static_cast<uint32_t>(start);
              return true;
            }
          }
          return false;
        },
        -1, "its peers to finish reading this rank's shared buffer of an earlier collective"));
    return region;
  }

  // Polls `ready` until it holds. `peer`: the rank whose slot it waits for (-1: this rank's
  // own slot, which any peer may hold up), named with `what` when the deadline passes.
  template <typename Ready>
  absl::Status WaitUntil(Ready&& ready, int peer, absl::string_view what) {
    if (ready()) return absl::OkStatus();
    // The clock is first read kPollsPerCheck polls in: most waits end before (a clock read
    // costs about as much as the rest of a small call on some virtual machines).
    std::optional<PollWindow> window;  // polling before naps, from the first check
    Clock::time_point first_check{};
    Clock::time_point next_probe{};
    auto nap = std::chrono::microseconds(1);
    for (int polls = 1;; ++polls) {
      if (ready()) return absl::OkStatus();
      if (oversubscribed_) {
        if (window) {
          window->Yield();
        } else {
          sched_yield();
        }
      }
      if (polls % kPollsPerCheck != 0) continue;
      const Clock::time_point now = Clock::now();
      if (polls == kPollsPerCheck) {
        window.emplace(kSpin);
        first_check = now;
        next_probe = now + kProbeAfter;
      }
      if (const absl::Status stop = Check(peer, now, what, ready); !stop.ok()) return stop;
      // A peer this wait needs may itself wait for a read this rank owes.
      const bool probe = now >= next_probe;
      CHORUS_RETURN_IF_ERROR(ctx_.SettleSlotDebts(probe));
      if (probe) {
        CHORUS_RETURN_IF_ERROR(ProbeMessages(peer));
        next_probe = now + kProbeAfter;
      }
      // Without it, a peer that shares this core runs only once this rank naps.
      if (!oversubscribed_ && window->open() && now - first_check >= kYieldAfterWaiting) {
        window->Yield();
      }
      if (!window->open()) {
        const timespec pause = {0, static_cast<long>(nap.count()) * 1000};
        nanosleep(&pause, nullptr);
        nap = std::min(nap * 2, kLongestNap);
      }
    }
  }

  // Why the wait must end, if it must: the caller aborted, the communicator broke, a peer
  // failed, or the deadline passed.
  // What a peer wrote before it left (its mapping outlives it) still counts: a peer's failure
  // ends the wait only while `ready` does not hold, and the failure breaks the communicator
  // only then.
  template <typename Ready>
  absl::Status Check(int peer, Clock::time_point now, absl::string_view what, Ready&& ready) {
    if (std::optional<absl::Status> interrupted = ctx_.Interrupted()) return *interrupted;
    for (int q = 0; q < p_; ++q) {
      if (q == r_ || (peer >= 0 && q != peer)) continue;
      const absl::Status status = slots_.PeerStatus(q);
      if (!status.ok() && ready()) return absl::OkStatus();  // the next poll returns
      if (!status.ok()) {
        return ctx_.get().PeerLost(q, status,
                                   absl::StrCat("a wait for ", peer >= 0 ? "its " : "", what));
      }
    }
    if (now < ctx_.deadline().time_point() || ready()) return absl::OkStatus();
    return DeadlineExceededError(
        absl::StrCat(ctx_.Describe(), ": did not finish before its deadline; still waiting for ",
                     peer >= 0 ? absl::StrCat("rank ", peer, "'s ") : std::string(), what, ". ",
                     peer >= 0 ? "That rank" : "A peer",
                     " may be stuck in an earlier collective, dead, or calling a different "
                     "collective; check its log"),
        peer);
  }

  // A peer that runs this collective over messages (its arguments differ, so it chose another
  // algorithm) sends its header to its ring successor, and so to some rank that waits here for
  // its predecessor: that rank reports the disagreement and breaks the communicator, which
  // ends the waits of the ranks on messages too.
  absl::Status ProbeMessages(int peer) {
    const int predecessor = Predecessor();
    for (int q = 0; q < p_; ++q) {
      if (q == r_ || (peer >= 0 && q != peer && q != predecessor)) continue;
      if (slots_.MessageWaiting(q, ctx_.header_tag())) return ctx_.get().CheckHeaderMessage(q);
    }
    return absl::OkStatus();
  }

  LazyContext& ctx_;
  SharedSlots& slots_;
  const int p_;
  const int r_;
  const int index_;
  const uint64_t stamp_;
  const bool oversubscribed_;  // yield the core at every poll
  const bool buffered_;        // the data rides in the ranks' buffers, not in the slots
  const bool two_step_;        // a buffered allreduce: its pieces are marked `done`
  Ranks read_;                 // the peers whose slots this call has read
  Ranks unread_;               // those it is still to read
  bool attached_ = false;      // every peer's slots are mapped
  bool published_ = false;     // this rank's slot holds this call
  bool done_ = false;          // this rank's piece of a buffered result is marked done
};

// The peers whose slots a broadcast's rank `r` reads: its predecessor's on the header ring,
// and the root's.
Ranks BroadcastSources(int r, int root, int predecessor) {
  Ranks sources{predecessor};
  if (r != root && predecessor != root) sources.push_back(root);
  return sources;
}

// The peers whose slots rank `r` of `p` reads: every one for an allreduce or a barrier;
// BroadcastSources for a broadcast.
Ranks SlotSources(const LazyContext& ctx, const CollectiveArgs& args) {
  const int r = ctx.rank();
  if (args.kind == CollectiveKind::kBroadcast) {
    return BroadcastSources(r, args.root, ctx.RingPredecessor());
  }
  Ranks sources;
  for (int q = 0; q < ctx.size(); ++q) {
    if (q != r) sources.push_back(q);
  }
  return sources;
}

// The communicator's slots, when they can carry a `kind` call of `bytes`.
absl::StatusOr<SharedSlots*> SlotsFor(LazyContext& ctx, CollectiveKind kind, size_t bytes) {
  // The selector refuses such calls before they are numbered; one that gets here anyway must
  // not leave its peers waiting.
  SharedSlots* slots = ctx.shared_slots();
  if (slots != nullptr && bytes <= SharedSlotsLimit(kind)) return slots;
  return ctx.get().Fatal(SharedSlotsRefusal(ctx.Describe(), kind, slots != nullptr, bytes));
}

// Piece `index` of `count` elements of `elem` bytes cut into `parts`, each starting on a
// kPieceAlignBytes boundary of the vector (the last may be short, or empty).
Piece AlignedPiece(size_t count, size_t elem, int parts, int index) {
  const size_t unit = std::max<size_t>(1, kPieceAlignBytes / elem);
  const Piece units =
      PieceOf((count + unit - 1) / unit, static_cast<size_t>(parts), static_cast<size_t>(index));
  const size_t start = std::min(count, units.start * unit);
  return {start, std::min(count - start, units.count * unit)};
}

// The buffered allreduce's steps after the inputs are published (`inputs`, in rank order);
// `own`: this rank's piece.
absl::Status ReduceAndGatherPieces(SlotCall& call, LazyContext& ctx, const CollectiveArgs& args,
                                   absl::Span<const uint8_t* const> inputs, Piece own) {
  const int p = ctx.size();
  const int r = ctx.rank();
  const size_t elem = args.elem();
  uint8_t* const out = static_cast<uint8_t*>(args.recv);
  const size_t block = std::max<size_t>(1, kReduceBlockBytes / elem);
  // The piece is reduced into this rank's buffer, where its peers copy it from, and each block
  // is copied to the output while it is still in the cache. This rank's own input is read
  // where the caller keeps it, which the output may be: a block of it is read before the
  // output's block is written.
  uint8_t* const result = call.Own();
  for (size_t first = own.start; first < own.start + own.count; first += block) {
    const size_t n = std::min(block, own.start + own.count - first);
    const size_t offset = first * elem;
    // In rank order, so that the result does not depend on which rank computes it.
    ReduceBuffers(args.type, args.op, inputs[0] + offset, inputs[1] + offset, result + offset, n);
    for (int q = 2; q < p; ++q) {
      ReduceBuffers(args.type, args.op, result + offset, inputs[q] + offset, result + offset, n);
    }
    std::memcpy(out + offset, result + offset, n * elem);
  }
  call.MarkDone();
  for (int step = 1; step < p; ++step) {
    const int q = (r + step) % p;  // each rank starts with a different peer
    CHORUS_RETURN_IF_ERROR(call.WaitDone(q));
    const Piece piece = AlignedPiece(args.count, elem, p, q);
    if (piece.count > 0) {
      std::memcpy(out + piece.start * elem, call.Data(q) + piece.start * elem, piece.count * elem);
    }
  }
  return absl::OkStatus();
}

absl::Status SlotsAllReduce(LazyContext& ctx, const CollectiveArgs& args) {
  const size_t bytes = args.count * args.elem();
  CHORUS_ASSIGN_OR_RETURN(SharedSlots* const slots, SlotsFor(ctx, args.kind, bytes));
  const int p = ctx.size();
  const int r = ctx.rank();
  SlotCall call(ctx, *slots, SlotSources(ctx, args), bytes);
  // A buffered call's own piece is reduced by this rank alone, from its input where it lies:
  // the peers read only their own pieces of this rank's buffer until the result is there.
  const Piece own = call.buffered() ? AlignedPiece(args.count, args.elem(), p, r) : Piece{0, 0};
  CHORUS_RETURN_IF_ERROR(call.Publish(args.send, bytes, static_cast<uint32_t>(p - 1),
                                      own.start * args.elem(), own.count * args.elem()));
  absl::InlinedVector<const uint8_t*, 16> inputs(p);
  // In a slot the output may be the input: read the copy.
  inputs[r] = call.buffered() ? static_cast<const uint8_t*>(args.send) : call.Own();
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    CHORUS_ASSIGN_OR_RETURN(inputs[q], call.Read(q, bytes));
  }
  if (call.buffered()) return ReduceAndGatherPieces(call, ctx, args, inputs, own);
  // In rank order, so that every rank computes the same bits.
  ReduceBuffers(args.type, args.op, inputs[0], inputs[1], args.recv, args.count);
  for (int q = 2; q < p; ++q) {
    ReduceBuffers(args.type, args.op, args.recv, inputs[q], args.recv, args.count);
  }
  return absl::OkStatus();
}

absl::Status SlotsBroadcast(LazyContext& ctx, const CollectiveArgs& args) {
  const size_t bytes = args.count * args.elem();
  CHORUS_ASSIGN_OR_RETURN(SharedSlots* const slots, SlotsFor(ctx, args.kind, bytes));
  const int p = ctx.size();
  const int r = ctx.rank();
  const bool root = r == args.root;
  const int predecessor = ctx.RingPredecessor();
  SlotCall call(ctx, *slots, BroadcastSources(r, args.root, predecessor), bytes);
  // Every other rank reads the root's slot; the others' are read by their ring successors
  // only.
  CHORUS_RETURN_IF_ERROR(
      call.Publish(args.send, root ? bytes : 0, root ? static_cast<uint32_t>(p - 1) : 1));
  if (root) {
    if (args.send != args.recv && bytes > 0) std::memcpy(args.recv, args.send, bytes);
  } else {
    CHORUS_ASSIGN_OR_RETURN(const uint8_t* data, call.Read(args.root, bytes));
    if (bytes > 0) std::memcpy(args.recv, data, bytes);
  }
  // The header ring, unless the predecessor is the root, read above. The root of a call
  // in a slot may leave its check to later calls: its part is done once its data is out, as a
  // message root's is once its sends are buffered, and it runs calls ahead while its peers
  // read. A buffered call's root waits: there the copies set the pace, not the wait, and
  // running ahead measured no faster (at 4 MiB on 2 ranks, up to a tenth slower).
  if (root && !call.buffered()) return call.CheckNowOrLater(predecessor);
  if (predecessor != args.root) CHORUS_RETURN_IF_ERROR(call.Read(predecessor, 0).status());
  return absl::OkStatus();
}

absl::Status SlotsBarrier(LazyContext& ctx, const CollectiveArgs& args) {
  CHORUS_ASSIGN_OR_RETURN(SharedSlots* const slots, SlotsFor(ctx, args.kind, 0));
  const int p = ctx.size();
  const int r = ctx.rank();
  SlotCall call(ctx, *slots, SlotSources(ctx, args), 0);
  CHORUS_RETURN_IF_ERROR(call.Publish(nullptr, 0, static_cast<uint32_t>(p - 1)));
  for (int q = 0; q < p; ++q) {
    if (q != r) CHORUS_RETURN_IF_ERROR(call.Read(q, 0).status());
  }
  return absl::OkStatus();
}

}  // namespace

size_t SharedSlotsLimit(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kBroadcast:
      return kSharedBufferPayloadBytes;
    case CollectiveKind::kBarrier:
      return kSharedSlotPayloadBytes;
    default:
      return 0;
  }
}

absl::Status SharedSlotsRefusal(absl::string_view call, CollectiveKind kind, bool have_slots,
                                size_t bytes) {
  if (!have_slots) {
    return InvalidArgumentError(absl::StrCat(
        call,
        ": the shared_slots algorithm needs ranks that share memory (the shm transport, the "
        "hybrid one with every rank on one host, or the in-process one) and CHORUS_SHARED_SLOTS "
        "not 0; name another algorithm"));
  }
  if (bytes > SharedSlotsLimit(kind)) {
    return InvalidArgumentError(absl::StrCat(
        call, ": the shared_slots algorithm carries at most ", SharedSlotsLimit(kind), " bytes of ",
        CollectiveKindName(kind), ", not ", bytes, "; name another algorithm"));
  }
  return absl::OkStatus();
}

void SharedSlotsSkipped(CollectiveContext& ctx, const CollectiveArgs& args) {
  SharedSlots* slots = ctx.shared_slots();
  if (slots == nullptr) return;
  LazyContext lazy(ctx);
  // A call that reads none of its sources: ~SlotCall leaves every read it owes to later calls.
  SlotCall call(lazy, *slots, SlotSources(lazy, args), 0);
  // Unattached, it owes nothing; the peer that could not be reached fails the call's peers.
  call.Attach().IgnoreError();
}

absl::Status SharedSlotsCall(LazyContext& ctx, const CollectiveArgs& args) {
  switch (args.kind) {
    case CollectiveKind::kAllReduce:
      return SlotsAllReduce(ctx, args);
    case CollectiveKind::kBroadcast:
      return SlotsBroadcast(ctx, args);
    case CollectiveKind::kBarrier:
      return SlotsBarrier(ctx, args);
    default:
      return ctx.get().Fatal(InvalidArgumentError(absl::StrCat(
          ctx.Describe(), ": the shared_slots algorithm runs allreduce, broadcast and ",
          "barrier, not ", CollectiveKindName(args.kind), "; name another algorithm")));
  }
}

absl::Status SharedSlotsCall(CollectiveContext& ctx, const CollectiveArgs& args) {
  LazyContext lazy(ctx);
  return SharedSlotsCall(lazy, args);
}

}  // namespace chorus
