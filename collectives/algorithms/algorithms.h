// Every algorithm, as a function that moves data only through a CollectiveContext. Each is
// listed with its collective and cost in select/algorithm_table.cc; buffer layouts per collective
// are in communicator.h. Algorithms may assume size() > 1 (the communicator handles one rank) and
// valid arguments (the communicator validates them).
#ifndef CHORUS_COLLECTIVES_ALGORITHMS_ALGORITHMS_H_
#define CHORUS_COLLECTIVES_ALGORITHMS_ALGORITHMS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "chorus/collectives/collective_args.h"
#include "chorus/collectives/engine/context.h"
#include "chorus/collectives/engine/lazy_context.h"
#include "chorus/collectives/select/algorithm_table.h"
#include "chorus/core/status.h"
#include "chorus/transport/shared_slots.h"

namespace chorus {

// ring.cc: segmented, pipelined rings.
absl::Status RingAllReduce(CollectiveContext& ctx, const CollectiveArgs& args);
absl::Status RingReduceScatter(CollectiveContext& ctx, const CollectiveArgs& args);  // and v
absl::Status RingAllGather(CollectiveContext& ctx, const CollectiveArgs& args);      // and v

// recursive_doubling.cc: log2(p) full exchanges (non-powers of two fold first).
absl::Status RecursiveDoublingAllReduce(CollectiveContext& ctx, const CollectiveArgs& args);
absl::Status RecursiveDoublingAllGather(CollectiveContext& ctx, const CollectiveArgs& args);

// rabenseifner.cc: recursive halving reduce-scatter (+ recursive doubling allgather).
absl::Status RabenseifnerAllReduce(CollectiveContext& ctx, const CollectiveArgs& args);
absl::Status RabenseifnerReduceScatter(CollectiveContext& ctx, const CollectiveArgs& args);

// tree.cc: binomial and double binary trees, pipelined by segment.
absl::Status BinomialAllReduce(CollectiveContext& ctx, const CollectiveArgs& args);
absl::Status BinomialBroadcast(CollectiveContext& ctx, const CollectiveArgs& args);
absl::Status BinomialReduce(CollectiveContext& ctx, const CollectiveArgs& args);
// The ring position of the binomial tree's parent of `position` (FeederFn); -1 at the root.
int BinomialFeeder(int position, int root_position, int size);
absl::Status DoubleTreeAllReduce(CollectiveContext& ctx, const CollectiveArgs& args);
absl::Status DoubleTreeBroadcast(CollectiveContext& ctx, const CollectiveArgs& args);
absl::Status DoubleTreeReduce(CollectiveContext& ctx, const CollectiveArgs& args);

// exchange.cc: pairwise alltoall(v), linear gather(v) / scatter(v), dissemination barrier.
absl::Status PairwiseAllToAll(CollectiveContext& ctx, const CollectiveArgs& args);
absl::Status LinearGather(CollectiveContext& ctx, const CollectiveArgs& args);
absl::Status LinearScatter(CollectiveContext& ctx, const CollectiveArgs& args);
absl::Status DisseminationBarrier(CollectiveContext& ctx, const CollectiveArgs& args);

// cuda_ipc.cc: CUDA device buffers of ranks on one host, read in place through CUDA IPC (the
// communicator does not stage them for these algorithms). CudaIpcReduceScatter serves both
// reduce-scatters; CudaIpcMove every collective that only moves data (broadcast, allgather(v),
// gather(v), scatter(v), alltoall(v); not an alltoall in place).
absl::Status CudaIpcAllReduce(CollectiveContext& ctx, const CollectiveArgs& args);
absl::Status CudaIpcReduce(CollectiveContext& ctx, const CollectiveArgs& args);
absl::Status CudaIpcReduceScatter(CollectiveContext& ctx, const CollectiveArgs& args);
absl::Status CudaIpcMove(CollectiveContext& ctx, const CollectiveArgs& args);
// Whether the communicator may choose cuda_ipc by itself for this collective: every rank must
// make the same choice from what it knows, so not for gatherv, scatterv and alltoallv (only some
// ranks know their sizes, and so their placement) nor alltoall (whether a rank's call is in place,
// which cuda_ipc refuses, is its own); those are staged unless a call names cuda_ipc.
bool CudaIpcAutomatic(CollectiveKind kind);

// shared_slots.cc: calls between ranks that share memory, through the communicator's shared
// slots (ctx.shared_slots()) instead of messages: allreduce and broadcast of at most
// kSharedBufferPayloadBytes (beyond kSharedSlotPayloadBytes their data rides in the ranks'
// shared buffers) and barrier; an InvalidArgument error on a communicator without them.
// One entry for the three: SharedSlotsCall runs the one `args.kind` names, on a context already
// made (the table's entry) or on one made only if the call needs it (a blocking call,
// engine/lazy_context.h).
absl::Status SharedSlotsCall(CollectiveContext& ctx, const CollectiveArgs& args);
absl::Status SharedSlotsCall(LazyContext& ctx, const CollectiveArgs& args);
inline constexpr size_t kSharedSlotPayloadBytes = 4096;
// Half a rank's shared buffer, so that every call of a kind that gains from it can take a half.
inline constexpr size_t kSharedBufferPayloadBytes = SharedSlots::kBufferBytes / 2;
// The most bytes a `kind` call carries on the shared slots (0: that kind never rides them).
size_t SharedSlotsLimit(CollectiveKind kind);
// Why a `kind` call named `call` cannot run on the shared slots (kInvalidArgument), or OK: the
// communicator has none (`have_slots` false), or `bytes` exceed SharedSlotsLimit(kind).
absl::Status SharedSlotsRefusal(absl::string_view call, CollectiveKind kind, bool have_slots,
                                size_t bytes);
// A call on the slots that will not run (Work::Abort before it started): the reads of its peers'
// slots it was counted for are owed, for later calls to pay (SlotDebts).
void SharedSlotsSkipped(CollectiveContext& ctx, const CollectiveArgs& args);

// hierarchical.cc: phases within hosts and between hosts (ctx.topology()), each run by a flat
// algorithm above on a group of ranks (GroupView). Any layout, also one host.
absl::Status HierarchicalAllReduce(CollectiveContext& ctx, const CollectiveArgs& args);
absl::Status HierarchicalBroadcast(CollectiveContext& ctx, const CollectiveArgs& args);
absl::Status HierarchicalReduce(CollectiveContext& ctx, const CollectiveArgs& args);
absl::Status HierarchicalAllGather(CollectiveContext& ctx, const CollectiveArgs& args);  // and v
absl::Status HierarchicalReduceScatter(CollectiveContext& ctx,
                                       const CollectiveArgs& args);  // and v
// The sum of the phases' cheapest flat costs for `kind` (one of the collectives above).
double HierarchicalCost(CollectiveKind kind, const CostInputs& in);

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_ALGORITHMS_ALGORITHMS_H_
