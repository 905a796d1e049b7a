// Rabenseifner's algorithm: a reduce-scatter by recursive halving (in round k each active rank
// keeps half of its current range of blocks, sends the other half to its partner and reduces
// the half it keeps), then, for allreduce, an allgather by recursive doubling that retraces
// the rounds. Bandwidth-optimal like the ring, with 2 log2(p) instead of 2(p-1) steps.
//
// Any rank count: non-powers of two fold first (fold.h). Active rank i ends the halving owning
// the blocks of ranks [FirstRank(i), FirstRank(i+1)); for reduce-scatter it hands the folded
// rank its block, for allreduce the folded rank receives the whole result.
//
// Determinism: each element is reduced by exactly one rank per round, as (the partner's data)
// op (this rank's data), and then copied: all ranks get identical bits.
#include <cstring>
#include <vector>

#include "chorus/collectives/algorithms/algorithms.h"
#include "chorus/collectives/algorithms/blocks.h"
#include "chorus/collectives/engine/fold.h"

namespace chorus {
namespace {

// Element range [begin, end) of the blocks of actives [first, end_index).
struct Range {
  size_t begin;
  size_t end;
  size_t count() const { return end - begin; }
};

class Halving {
 public:
  Halving(CollectiveContext& ctx, const CollectiveArgs& args)
      : ctx_(ctx),
        args_(args),
        fold_(ctx.size()),
        offsets_(PackedOffsets(RankBlocks(args, ctx.size()))),
        elem_(args.elem()),
        index_(fold_.ActiveIndex(ctx.rank())) {}

  const Fold& fold() const { return fold_; }
  int index() const { return index_; }
  const std::vector<size_t>& offsets() const { return offsets_; }
  size_t total_bytes() const { return offsets_.back() * elem_; }

  Range RangeOf(int first_index, int end_index) const {
    return {offsets_[fold_.FirstRank(first_index)], offsets_[fold_.FirstRank(end_index)]};
  }

  // Folds and runs the recursive halving; afterwards an active rank's `acc` holds its own
  // blocks, RangeOf(index, index + 1), fully reduced. Folded ranks return at once after
  // sending their data (step 0).
  absl::Status ReduceScatter(uint8_t* acc) {
    const int rank = ctx_.rank();
    const uint8_t* input = static_cast<const uint8_t*>(args_.send);
    if (index_ < 0) return ctx_.Wait(ctx_.Send(rank + 1, 0, input, total_bytes()));
    uint8_t* incoming = ctx_.Scratch(total_bytes());
    const uint8_t* current = input;  // where this rank's partial of each block is
    if (rank < 2 * fold_.extra) {
      CHORUS_RETURN_IF_ERROR(
          ctx_.Wait(ctx_.RecvReduce(rank - 1, 0, incoming, total_bytes(), input, acc)));
      current = acc;
    }
    int low = 0;
    int round = 1;
    for (int half = fold_.active / 2; half >= 1; half /= 2, ++round) {
      const bool lower = index_ < low + half;
      const Range keep = lower ? RangeOf(low, low + half) : RangeOf(low + half, low + 2 * half);
      const Range give = lower ? RangeOf(low + half, low + 2 * half) : RangeOf(low, low + half);
      const int partner = fold_.RankOf(index_ ^ half);
      // Reduced as it arrives where the transport hands data over (RecvReduce).
      const Transfer transfers[] = {
          ctx_.RecvReduce(partner, round, incoming, keep.count() * elem_,
                          current + keep.begin * elem_, acc + keep.begin * elem_),
          ctx_.Send(partner, round, current + give.begin * elem_, give.count() * elem_)};
      CHORUS_RETURN_IF_ERROR(ctx_.WaitAll(transfers));
      current = acc;
      if (!lower) low += half;
    }
    return absl::OkStatus();
  }

  int rounds() const { return fold_.Rounds(); }

 private:
  CollectiveContext& ctx_;
  const CollectiveArgs& args_;
  const Fold fold_;
  const std::vector<size_t> offsets_;
  const size_t elem_;
  const int index_;
};

}  // namespace

absl::Status RabenseifnerAllReduce(CollectiveContext& ctx, const CollectiveArgs& args) {
  Halving halving(ctx, args);
  const Fold& fold = halving.fold();
  const int rank = ctx.rank();
  const int index = halving.index();
  const size_t elem = args.elem();
  uint8_t* out = static_cast<uint8_t*>(args.recv);
  const int last_step = 2 * halving.rounds() + 1;

  CHORUS_RETURN_IF_ERROR(halving.ReduceScatter(out));
  if (index < 0) return ctx.Wait(ctx.Recv(rank + 1, last_step, out, halving.total_bytes()));

  // Recursive doubling allgather, retracing the halving rounds from the smallest range up.
  // Every round's receive is posted first: each fills a range no round sends from before it
  // has arrived, and a partner running ahead then sends straight into place, where it would
  // otherwise be buffered and copied.
  const int first_round = halving.rounds() + 1;
  std::vector<Transfer> recvs;
  recvs.reserve(halving.rounds());
  for (int width = 1, round = first_round; width < fold.active; width *= 2, ++round) {
    const int theirs = (index & ~(width - 1)) ^ width;
    const Range their_range = halving.RangeOf(theirs, theirs + width);
    recvs.push_back(ctx.Recv(fold.RankOf(index ^ width), round, out + their_range.begin * elem,
                             their_range.count() * elem));
  }
  for (int width = 1, round = first_round; width < fold.active; width *= 2, ++round) {
    const int mine = index & ~(width - 1);
    const Range my_range = halving.RangeOf(mine, mine + width);
    const Transfer transfers[] = {recvs[round - first_round],
                                  ctx.Send(fold.RankOf(index ^ width), round,
                                           out + my_range.begin * elem, my_range.count() * elem)};
    CHORUS_RETURN_IF_ERROR(ctx.WaitAll(transfers));
  }
  if (rank < 2 * fold.extra) {
    return ctx.Wait(ctx.Send(rank - 1, last_step, out, halving.total_bytes()));
  }
  return absl::OkStatus();
}

absl::Status RabenseifnerReduceScatter(CollectiveContext& ctx, const CollectiveArgs& args) {
  Halving halving(ctx, args);
  const Fold& fold = halving.fold();
  const int rank = ctx.rank();
  const size_t elem = args.elem();
  const std::vector<size_t>& offsets = halving.offsets();
  uint8_t* out = static_cast<uint8_t*>(args.recv);
  const size_t own_bytes = (offsets[rank + 1] - offsets[rank]) * elem;
  const int last_step = halving.rounds() + 1;

  if (halving.index() < 0) {
    CHORUS_RETURN_IF_ERROR(halving.ReduceScatter(nullptr));
    return ctx.Wait(ctx.Recv(rank + 1, last_step, out, own_bytes));
  }
  uint8_t* acc = ctx.Scratch(halving.total_bytes());
  CHORUS_RETURN_IF_ERROR(halving.ReduceScatter(acc));
  if (rank < 2 * fold.extra) {
    const size_t folded_bytes = (offsets[rank] - offsets[rank - 1]) * elem;
    CHORUS_RETURN_IF_ERROR(
        ctx.Wait(ctx.Send(rank - 1, last_step, acc + offsets[rank - 1] * elem, folded_bytes)));
  }
  if (own_bytes > 0) std::memcpy(out, acc + offsets[rank] * elem, own_bytes);
  return absl::OkStatus();
}

}  // namespace chorus
