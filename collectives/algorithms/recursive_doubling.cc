// Recursive doubling: in round k every active rank exchanges everything it has with the rank
// whose index differs in bit k. log2(p) rounds of the full message: the latency-optimal
// choice for small messages. Non-powers of two fold first (fold.h) and unfold at the end,
// which costs two more steps.
//
// Determinism: in each allreduce round both partners compute (lower index's data) op (higher
// index's data) from identical inputs, so after round k the 2^k ranks of a group hold the same
// bits, and in the end all ranks do.
#include <cstring>
#include <utility>

#include "chorus/collectives/algorithms/algorithms.h"
#include "chorus/collectives/algorithms/blocks.h"
#include "chorus/collectives/engine/fold.h"
#include "chorus/collectives/reduce/reduce_kernels.h"

namespace chorus {

absl::Status RecursiveDoublingAllReduce(CollectiveContext& ctx, const CollectiveArgs& args) {
  const Fold fold(ctx.size());
  const int rank = ctx.rank();
  const size_t bytes = args.count * args.elem();
  uint8_t* out = static_cast<uint8_t*>(args.recv);
  const int rounds = fold.Rounds();
  const int index = fold.ActiveIndex(rank);
  ctx.WillSendTo(fold.Peers(rank));

  if (index < 0) {  // folded away: hand the data over, get the result back
    CHORUS_RETURN_IF_ERROR(ctx.Wait(ctx.Send(rank + 1, 0, args.send, bytes)));
    return ctx.Wait(ctx.Recv(rank + 1, rounds + 1, out, bytes));
  }
  uint8_t* incoming = ctx.Scratch(bytes);
  if (rank < 2 * fold.extra) {
    CHORUS_RETURN_IF_ERROR(ctx.Wait(ctx.Recv(rank - 1, 0, incoming, bytes)));
    ReduceBuffers(args.type, args.op, incoming, args.send, out, args.count);
  } else if (args.send != out) {
    std::memcpy(out, args.send, bytes);
  }
  for (int round = 0; round < rounds; ++round) {
    const int partner_index = index ^ (1 << round);
    const int partner = fold.RankOf(partner_index);
    // Receive first, so the partner's data can land straight in the posted buffer.
    const Transfer transfers[] = {ctx.Recv(partner, round + 1, incoming, bytes),
                                  ctx.Send(partner, round + 1, out, bytes)};
    CHORUS_RETURN_IF_ERROR(ctx.WaitAll(transfers));
    if (partner_index < index) {
      ReduceBuffers(args.type, args.op, incoming, out, out, args.count);
    } else {
      ReduceBuffers(args.type, args.op, out, incoming, out, args.count);
    }
  }
  if (rank < 2 * fold.extra) {
    return ctx.Wait(ctx.Send(rank - 1, rounds + 1, out, bytes));
  }
  return absl::OkStatus();
}

absl::Status RecursiveDoublingAllGather(CollectiveContext& ctx, const CollectiveArgs& args) {
  const Fold fold(ctx.size());
  const int rank = ctx.rank();
  const size_t elem = args.elem();
  const std::vector<size_t> offsets = PackedOffsets(RankBlocks(args, ctx.size()));
  uint8_t* out = static_cast<uint8_t*>(args.recv);
  const int rounds = fold.Rounds();
  const int index = fold.ActiveIndex(rank);
  ctx.WillSendTo(fold.Peers(rank));
  auto span_of = [&](int first_rank, int end_rank) {
    return std::make_pair(out + offsets[first_rank] * elem,
                          (offsets[end_rank] - offsets[first_rank]) * elem);
  };

  uint8_t* own = out + offsets[rank] * elem;
  const size_t own_bytes = (offsets[rank + 1] - offsets[rank]) * elem;
  if (args.send != own && own_bytes > 0) std::memcpy(own, args.send, own_bytes);

  if (index < 0) {
    CHORUS_RETURN_IF_ERROR(ctx.Wait(ctx.Send(rank + 1, 0, own, own_bytes)));
    return ctx.Wait(ctx.Recv(rank + 1, rounds + 1, out, offsets.back() * elem));
  }
  if (rank < 2 * fold.extra) {
    auto [data, size] = span_of(rank - 1, rank);
    CHORUS_RETURN_IF_ERROR(ctx.Wait(ctx.Recv(rank - 1, 0, data, size)));
  }
  for (int round = 0; round < rounds; ++round) {
    const int width = 1 << round;
    const int mine = index & ~(width - 1);  // first active index of the group I hold
    const int theirs = mine ^ width;
    auto [my_data, my_size] = span_of(fold.FirstRank(mine), fold.FirstRank(mine + width));
    auto [their_data, their_size] = span_of(fold.FirstRank(theirs), fold.FirstRank(theirs + width));
    const int partner = fold.RankOf(index ^ width);
    const Transfer transfers[] = {ctx.Recv(partner, round + 1, their_data, their_size),
                                  ctx.Send(partner, round + 1, my_data, my_size)};
    CHORUS_RETURN_IF_ERROR(ctx.WaitAll(transfers));
  }
  if (rank < 2 * fold.extra) {
    return ctx.Wait(ctx.Send(rank - 1, rounds + 1, out, offsets.back() * elem));
  }
  return absl::OkStatus();
}

}  // namespace chorus
