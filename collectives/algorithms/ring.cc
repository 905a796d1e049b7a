// Rings. The array is cut into one block per rank; in reduce-scatter step s rank r sends its
// partial of block r-s-1 to its right neighbour and adds its own contribution to block r-s-2
// arriving from the left, so after p-1 steps it holds block r fully reduced; in allgather step
// s it forwards block r-s and receives block r-s-1 straight into the output.
//
// Each block is cut into segments and the whole run is one pipeline of (step, segment)
// chunks: `pipeline_depth` receives are posted ahead, so the reduction of one segment overlaps
// the transfer of the next, and a chunk is sent once the chunk it depends on (same segment,
// previous step) has been received and reduced and the neighbour's receive for it is posted,
// as far as this rank can tell from its own receives (post_sends_before).
//
// Determinism: every block is reduced by one rank at a time in ring order, always as
// (partial from the left) op (own contribution), and then copied to everyone: all ranks get
// identical bits, and the same inputs give the same bits on every run.
#include <cstring>
#include <functional>
#include <vector>

#include "chorus/collectives/algorithms/algorithms.h"
#include "chorus/collectives/algorithms/blocks.h"

namespace chorus {
namespace {

struct RingSpec {
  std::vector<size_t> counts;                  // elements per block
  const uint8_t* input = nullptr;              // reduce-scatter: this rank's contributions
  std::function<uint8_t*(int block)> partial;  // reduce-scatter: where block's result goes
  uint8_t* output = nullptr;                   // allgather: the full output array
  bool reduce_scatter = false;
  bool allgather = false;
};

absl::Status RunRing(CollectiveContext& ctx, const CollectiveArgs& args, const RingSpec& spec) {
  const int p = ctx.size();
  const int r = ctx.rank();
  const size_t elem = args.elem();
  const std::vector<size_t> offsets = PackedOffsets(spec.counts);
  size_t largest = 0;
  for (size_t count : spec.counts) largest = std::max(largest, count);
  if (offsets.back() == 0) return absl::OkStatus();

  const size_t segments = SegmentsFor(largest * elem, ctx.tuning().segments.ring_bytes);
  const int rs_steps = spec.reduce_scatter ? p - 1 : 0;
  const int steps = rs_steps + (spec.allgather ? p - 1 : 0);
  const size_t chunks = static_cast<size_t>(steps) * segments;
  // Receives posted ahead; an allgather receive also needs the reduce-scatter send it
  // overwrites to have been posted, which holds when the window spans at most rs_steps + 1
  // steps of segments.
  size_t window = std::min<size_t>(std::max(ctx.tuning().pipeline_depth, 1), chunks);
  if (spec.reduce_scatter && spec.allgather) {
    window = std::min(window, static_cast<size_t>(rs_steps + 1) * segments);
  }
  // The last allgather step's blocks are final and not forwarded: when the output outgrows
  // the cache they are written past it (RecvStreaming), saving the reads of their lines.
  const bool final_outgrows_cache = offsets.back() * elem > ctx.tuning().streaming_bytes;
  const int left = Mod(r - 1, p);
  const int right = Mod(r + 1, p);

  // Received partials are reduced as they arrive (RecvReduce); transports that store them
  // first use one of these slots per receive in flight.
  const size_t slot_bytes = PieceOf(largest, segments, 0).count * elem;
  uint8_t* slots = spec.reduce_scatter ? ctx.Scratch(slot_bytes * window) : nullptr;

  auto step_of = [&](size_t chunk) { return static_cast<int>(chunk / segments); };
  auto is_rs = [&](int step) { return step < rs_steps; };
  auto send_block = [&](int step) {
    return is_rs(step) ? Mod(r - step - 1, p) : Mod(r - (step - rs_steps), p);
  };
  auto recv_block = [&](int step) {
    return is_rs(step) ? Mod(r - step - 2, p) : Mod(r - (step - rs_steps) - 1, p);
  };
  auto piece = [&](int block, size_t chunk) {
    return PieceOf(spec.counts[block], segments, chunk % segments);
  };

  std::vector<Transfer> sends(chunks);
  std::vector<Transfer> recvs(chunks);
  auto post_send = [&](size_t chunk) {
    const int step = step_of(chunk);
    const int block = send_block(step);
    const Piece seg = piece(block, chunk);
    const uint8_t* source;
    if (is_rs(step)) {
      source = (step == 0 ? spec.input + offsets[block] * elem : spec.partial(block));
    } else {
      source = spec.output + offsets[block] * elem;
    }
    sends[chunk] = ctx.Send(right, chunk, source + seg.start * elem, seg.count * elem);
  };
  auto post_recv = [&](size_t chunk) -> absl::Status {
    const int step = step_of(chunk);
    const int block = recv_block(step);
    const Piece seg = piece(block, chunk);
    if (is_rs(step)) {
      recvs[chunk] = ctx.RecvReduce(
          left, chunk, slots + (chunk % window) * slot_bytes, seg.count * elem,
          spec.input + (offsets[block] + seg.start) * elem, spec.partial(block) + seg.start * elem);
      return absl::OkStatus();
    }
    // Allgather step s overwrites the region that reduce-scatter step s sent from; that send
    // must be finished first (it almost always is, p-1 steps later).
    const size_t aliased = chunk - static_cast<size_t>(rs_steps) * segments;
    if (spec.reduce_scatter) CHORUS_RETURN_IF_ERROR(ctx.Wait(sends[aliased]));
    uint8_t* into = spec.output + (offsets[block] + seg.start) * elem;
    recvs[chunk] = step == steps - 1 && final_outgrows_cache
                       ? ctx.RecvStreaming(left, chunk, into, seg.count * elem)
                       : ctx.Recv(left, chunk, into, seg.count * elem);
    return absl::OkStatus();
  };

  // Sends go out in chunk order, each once the chunk it forwards is in (`segments` earlier)
  // and no further ahead of this rank's receives than the window: the neighbour, as far along
  // as this rank, has posted the receives that far, and a message beyond them would arrive
  // unexpected (a transport then keeps it aside; shm copies a large one into memory of its
  // own, and with more segments than the window that was every later step's message).
  const size_t send_lead = std::min(window, segments);
  size_t next_send = 0;
  auto post_sends_before = [&](size_t end) {
    while (next_send < std::min(end, chunks)) post_send(next_send++);
  };
  post_sends_before(send_lead);
  for (size_t chunk = 0; chunk < window; ++chunk) CHORUS_RETURN_IF_ERROR(post_recv(chunk));
  for (size_t chunk = 0; chunk < chunks; ++chunk) {
    CHORUS_RETURN_IF_ERROR(ctx.Wait(recvs[chunk]));
    post_sends_before(chunk + 1 + send_lead);
    if (chunk + window < chunks) CHORUS_RETURN_IF_ERROR(post_recv(chunk + window));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RingAllReduce(CollectiveContext& ctx, const CollectiveArgs& args) {
  RingSpec spec;
  spec.counts = RankBlocks(args, ctx.size());
  const std::vector<size_t> offsets = PackedOffsets(spec.counts);
  uint8_t* output = static_cast<uint8_t*>(args.recv);
  const size_t elem = args.elem();
  spec.input = static_cast<const uint8_t*>(args.send);
  spec.partial = [&](int block) { return output + offsets[block] * elem; };
  spec.output = output;
  spec.reduce_scatter = true;
  spec.allgather = true;
  return RunRing(ctx, args, spec);
}

absl::Status RingReduceScatter(CollectiveContext& ctx, const CollectiveArgs& args) {
  RingSpec spec;
  spec.counts = RankBlocks(args, ctx.size());
  const std::vector<size_t> offsets = PackedOffsets(spec.counts);
  const size_t elem = args.elem();
  // Partials of other ranks' blocks pass through scratch; this rank's block goes straight to
  // the output (which may be the input's own block: in place).
  uint8_t* scratch = ctx.Scratch(offsets.back() * elem);
  uint8_t* output = static_cast<uint8_t*>(args.recv);
  const int self = ctx.rank();
  spec.input = static_cast<const uint8_t*>(args.send);
  spec.partial = [&](int block) {
    return block == self ? output : scratch + offsets[block] * elem;
  };
  spec.reduce_scatter = true;
  return RunRing(ctx, args, spec);
}

absl::Status RingAllGather(CollectiveContext& ctx, const CollectiveArgs& args) {
  RingSpec spec;
  spec.counts = RankBlocks(args, ctx.size());
  const std::vector<size_t> offsets = PackedOffsets(spec.counts);
  const size_t elem = args.elem();
  spec.output = static_cast<uint8_t*>(args.recv);
  uint8_t* own = spec.output + offsets[ctx.rank()] * elem;
  if (args.send != own && spec.counts[ctx.rank()] > 0) {
    std::memcpy(own, args.send, spec.counts[ctx.rank()] * elem);
  }
  spec.allgather = true;
  return RunRing(ctx, args, spec);
}

}  // namespace chorus
