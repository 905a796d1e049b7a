// Algorithms whose messages go straight between the ranks that own the data: pairwise
// exchange for alltoall(v), linear gather(v) / scatter(v) at the root, and the dissemination
// barrier. None of them combines values, so determinism is trivial.
#include <algorithm>
#include <cstring>
#include <vector>

#include "chorus/collectives/algorithms/algorithms.h"
#include "chorus/collectives/algorithms/blocks.h"

namespace chorus {
namespace {

void CopyIfDistinct(void* to, const void* from, size_t bytes) {
  if (to != from && bytes > 0) std::memcpy(to, from, bytes);
}

}  // namespace

// Step s (1..p-1): send to rank+s, receive from rank-s; `pipeline_depth` steps in flight.
absl::Status PairwiseAllToAll(CollectiveContext& ctx, const CollectiveArgs& args) {
  const int p = ctx.size();
  const int r = ctx.rank();
  const size_t elem = args.elem();
  const RankLayout to = SendBlocks(args, p);
  const RankLayout from = RecvBlocks(args, p);
  uint8_t* out = static_cast<uint8_t*>(args.recv);
  const uint8_t* in = static_cast<const uint8_t*>(args.send);
  if (args.send == args.recv) {  // in place: send from a copy, receive into the buffer
    const size_t extent = to.extent() * elem;
    uint8_t* copy = ctx.Scratch(extent);
    if (extent > 0) std::memcpy(copy, in, extent);
    in = copy;
  }
  CopyIfDistinct(out + from.displs[r] * elem, in + to.displs[r] * elem, to.counts[r] * elem);
  const int depth = std::max(ctx.tuning().pipeline_depth, 1);
  std::vector<Transfer> transfers(2 * p);
  for (int step = 1; step < p; ++step) {
    if (step > depth) {
      CHORUS_RETURN_IF_ERROR(ctx.WaitAll({&transfers[2 * (step - depth)], 2}));
    }
    const int dst = Mod(r + step, p);
    const int src = Mod(r - step, p);
    transfers[2 * step + 1] =
        ctx.Recv(src, step, out + from.displs[src] * elem, from.counts[src] * elem);
    transfers[2 * step] = ctx.Send(dst, step, in + to.displs[dst] * elem, to.counts[dst] * elem);
  }
  for (int step = std::max(1, p - depth); step < p; ++step) {
    CHORUS_RETURN_IF_ERROR(ctx.WaitAll({&transfers[2 * step], 2}));
  }
  return absl::OkStatus();
}

absl::Status LinearGather(CollectiveContext& ctx, const CollectiveArgs& args) {
  const int p = ctx.size();
  const size_t elem = args.elem();
  if (ctx.rank() != args.root) {
    return ctx.Wait(ctx.Send(args.root, 0, args.send, args.count * elem));
  }
  const RankLayout from = RecvBlocks(args, p);
  uint8_t* out = static_cast<uint8_t*>(args.recv);
  CopyIfDistinct(out + from.displs[args.root] * elem, args.send, args.count * elem);
  std::vector<Transfer> recvs;
  for (int q = 0; q < p; ++q) {
    if (q == args.root) continue;
    recvs.push_back(ctx.Recv(q, 0, out + from.displs[q] * elem, from.counts[q] * elem));
  }
  return ctx.WaitAll(recvs);
}

absl::Status LinearScatter(CollectiveContext& ctx, const CollectiveArgs& args) {
  const int p = ctx.size();
  const size_t elem = args.elem();
  if (ctx.rank() != args.root) {
    return ctx.Wait(ctx.Recv(args.root, 0, args.recv, args.count * elem));
  }
  const RankLayout to = SendBlocks(args, p);
  const uint8_t* in = static_cast<const uint8_t*>(args.send);
  std::vector<Transfer> sends;
  for (int q = 0; q < p; ++q) {
    if (q == args.root) continue;
    sends.push_back(ctx.Send(q, 0, in + to.displs[q] * elem, to.counts[q] * elem));
  }
  CopyIfDistinct(args.recv, in + to.displs[args.root] * elem, args.count * elem);
  return ctx.WaitAll(sends);
}

// Round k: signal the rank 2^k places further on the header ring, wait for the one 2^k places
// back. After ceil(log2 p) rounds every rank has heard, directly or transitively, from every
// other. Round 0 signals the ring successor, so the header rides on it.
absl::Status DisseminationBarrier(CollectiveContext& ctx, const CollectiveArgs& args) {
  static const uint8_t kToken = 0;
  uint8_t sink = 0;
  int round = 0;
  const int position = ctx.RingPosition(ctx.rank());
  for (int distance = 1; distance < ctx.size(); distance *= 2, ++round) {
    const Transfer transfers[] = {
        ctx.Recv(ctx.RankAtRingPosition(position - distance), round, &sink, 0),
        ctx.Send(ctx.RankAtRingPosition(position + distance), round, &kToken, 0)};
    CHORUS_RETURN_IF_ERROR(ctx.WaitAll(transfers));
  }
  return absl::OkStatus();
}

}  // namespace chorus
