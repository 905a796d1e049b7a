// Collectives on CUDA device buffers between the ranks of one host, read in place through CUDA
// IPC: no copy through host memory and no byte on a transport, only a few small messages to each
// peer.
//
//   1. Each rank waits for the work queued on its stream (its input is ready), then sends every
//      peer a descriptor: its process, device, the IPC handles of its buffers, and where in its
//      send buffer the block for that peer lies.
//   2. Each rank computes its own output from the peers' buffers where they are: device kernels
//      and device-to-device copies on the caller's stream. Reductions split the array into a
//      block per rank; rank r reduces block r of every input (into its own output, or the
//      root's). The allreduce then tells every peer that its block is done and copies the other
//      blocks from their owners' outputs. The collectives that only move data (allgather,
//      gather, scatter, alltoall, their v-variants, broadcast) copy each peer's block for this
//      rank into its place.
//   3. Each rank tells every peer that it has stopped reading (and writing) their memory, and
//      returns only once each peer has said the same, so no rank's buffers change while another
//      still uses them.
//
// A rank that cannot take part (its buffers are host memory, or its alltoall is in place, where
// a peer's block would be overwritten while another rank still reads it) says so in its
// descriptor; every rank then fails with kInvalidArgument naming it, instead of some ranks
// waiting for it. A disagreement only one rank can see (a block of another size than the peer
// holds) or an error of the GPU runtime breaks the communicator, so the peers waiting for this
// rank fail at once.
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chorus/collectives/algorithms/algorithms.h"
#include "chorus/collectives/shape.h"
#include "chorus/cuda/gpu_runtime.h"

namespace chorus {
namespace {

// Steps of the message rounds.
enum Step : uint64_t { kDescriptors = 0, kReduced = 1, kDoneReading = 2 };

// Why a rank cannot take part, as its descriptor says.
enum Refusal : int32_t { kTakesPart = 0, kHostMemory = 1, kInPlaceExchange = 2 };

// What a rank tells one peer about its buffers. Plain bytes on the wire between processes of one
// host (same build, same byte order).
struct Descriptor {
  int32_t refusal = kTakesPart;
  int32_t device = -1;
  int64_t pid = 0;
  uint64_t send_address = 0;  // in the rank's own process; 0: no such buffer on that rank
  uint64_t recv_address = 0;
  // The bytes of the send buffer that go to this peer, from `block_at` (moving collectives).
  uint64_t block_at = 0;
  uint64_t block_bytes = 0;
  IpcMemory send;
  IpcMemory recv;
};

// A block of a buffer, in elements.
struct Block {
  size_t at = 0;
  size_t count = 0;
};

// Every rank's buffers, as addresses in this process (null where a rank has none), and each
// peer's block for this rank in its send buffer.
struct PeerBuffers {
  GpuRuntime* runtime = nullptr;
  int device = -1;
  void* stream = nullptr;
  std::vector<const char*> send;
  std::vector<char*> recv;
  std::vector<const char*> block_from;
  std::vector<size_t> block_bytes;
};

// Where this rank's send buffer holds what goes to `peer` in a collective that moves data
// (nothing for a peer that takes nothing from it).
Block SourceBlock(const CollectiveArgs& args, const BufferElements& mine,
                  const RankLayout& send_blocks, int peer) {
  if (mine.send == 0) return {};
  if (!send_blocks.counts.empty()) return {send_blocks.displs[peer], send_blocks.counts[peer]};
  // One block: to every rank, or (gather) to the root alone.
  if (ShapeOf(args.kind).recv_root_only && peer != args.root) return {};
  return {0, mine.send};
}

// Where `peer`'s block goes in this rank's receive buffer.
Block DestinationBlock(const CollectiveArgs& args, const BufferElements& mine,
                       const RankLayout& recv_blocks, int peer) {
  if (mine.recv == 0) return {};
  if (!recv_blocks.counts.empty()) return {recv_blocks.displs[peer], recv_blocks.counts[peer]};
  // One block, from the root (broadcast, scatter).
  if (peer != args.root) return {};
  return {0, mine.recv};
}

// A GPU runtime's error as the collective's: its description first; it breaks the communicator,
// since this rank cannot go on with its peers. (Errors of the messages come from the context,
// which describes them itself.)
absl::Status OnDevice(CollectiveContext& ctx, const absl::Status& status) {
  if (status.ok()) return status;
  return ctx.Break(
      MakeError(GetErrorKind(status), absl::StrCat(ctx.Describe(), ": ", status.message())));
}

// The address of rank `rank`'s buffer in this process: its own address when that rank is this
// process (CUDA refuses to open a process's own handles), else its IPC handle opened.
absl::StatusOr<char*> PeerBuffer(CollectiveContext& ctx, GpuRuntime& runtime, int device, int rank,
                                 const Descriptor& peer, uint64_t address,
                                 const IpcMemory& memory) {
  if (address == 0) return nullptr;
  if (peer.pid == getpid()) return reinterpret_cast<char*>(address);
  absl::StatusOr<void*> opened = runtime.OpenMemory(device, memory);
  if (!opened.ok()) {
    return ctx.Break(
        MakeError(GetErrorKind(opened.status()),
                  absl::StrCat(ctx.Describe(), ": opening rank ", rank,
                               "'s buffer through CUDA IPC: ", opened.status().message()),
                  rank));
  }
  return static_cast<char*>(*opened);
}

// One byte to each peer for `step`, and one from each.
absl::Status Notify(CollectiveContext& ctx, Step step) {
  static const uint8_t kByte = 1;
  std::vector<uint8_t> got(ctx.size());
  std::vector<Transfer> transfers;
  for (int peer = 0; peer < ctx.size(); ++peer) {
    if (peer == ctx.rank()) continue;
    transfers.push_back(ctx.Recv(peer, step, &got[peer], 1));
    transfers.push_back(ctx.Send(peer, step, &kByte, 1));
  }
  return ctx.WaitAll(transfers);
}

// This rank's descriptor for each peer.
absl::StatusOr<std::vector<Descriptor>> Describe(CollectiveContext& ctx, const CollectiveArgs& args,
                                                 GpuRuntime* runtime) {
  const int p = ctx.size();
  const int r = ctx.rank();
  const BufferElements elements = ElementsOf(args, r, p);
  Descriptor mine;
  mine.pid = getpid();
  if (elements.send == 0 && elements.recv == 0) {
    // Nothing to read or write here (a v-collective's empty block): no placement to check, and
    // no peer reads from this rank.
  } else if (args.cuda_device < 0 || runtime == nullptr) {
    mine.refusal = kHostMemory;
  } else if (!CudaIpcCanRun(args, r)) {
    mine.refusal = kInPlaceExchange;
  } else {
    mine.device = args.cuda_device;
    // The input must be complete before a peer reads it.
    CHORUS_RETURN_IF_ERROR(
        OnDevice(ctx, runtime->WaitStream(args.cuda_device, args.cuda_stream, ctx.deadline())));
    if (elements.send > 0) {
      mine.send_address = reinterpret_cast<uint64_t>(args.send);
      absl::StatusOr<IpcMemory> send = runtime->ExportMemory(args.cuda_device, args.send);
      CHORUS_RETURN_IF_ERROR(OnDevice(ctx, send.status()));
      mine.send = *send;
    }
    if (elements.recv > 0) {
      mine.recv_address = reinterpret_cast<uint64_t>(args.recv);
      absl::StatusOr<IpcMemory> recv = runtime->ExportMemory(args.cuda_device, args.recv);
      CHORUS_RETURN_IF_ERROR(OnDevice(ctx, recv.status()));
      mine.recv = *recv;
    }
  }
  std::vector<Descriptor> descriptors(p, mine);
  if (IsReduction(args.kind)) return descriptors;
  const RankLayout send_blocks = SendBlocks(args, p);
  for (int peer = 0; peer < p; ++peer) {
    const Block block = SourceBlock(args, elements, send_blocks, peer);
    descriptors[peer].block_at = block.at * args.elem();
    descriptors[peer].block_bytes = block.count * args.elem();
  }
  return descriptors;
}

// Step 1: waits for this rank's stream, exchanges descriptors and opens the peers' buffers.
absl::StatusOr<PeerBuffers> ExchangeBuffers(CollectiveContext& ctx, const CollectiveArgs& args) {
  const int p = ctx.size();
  const int r = ctx.rank();
  PeerBuffers buffers;
  buffers.runtime = InstalledGpuRuntime();
  buffers.device = args.cuda_device;
  buffers.stream = args.cuda_stream;
  CHORUS_ASSIGN_OR_RETURN(std::vector<Descriptor> mine, Describe(ctx, args, buffers.runtime));
  std::vector<Descriptor> peers(p);
  std::vector<Transfer> transfers;
  for (int peer = 0; peer < p; ++peer) {
    if (peer == r) continue;
    transfers.push_back(ctx.Recv(peer, kDescriptors, &peers[peer], sizeof(Descriptor)));
    transfers.push_back(ctx.Send(peer, kDescriptors, &mine[peer], sizeof(Descriptor)));
  }
  CHORUS_RETURN_IF_ERROR(ctx.WaitAll(transfers));
  peers[r] = mine[r];
  for (int peer = 0; peer < p; ++peer) {
    if (peers[peer].refusal == kTakesPart) continue;
    return MakeError(
        ErrorKind::kInvalidArgument,
        absl::StrCat(ctx.Describe(), ": the cuda_ipc algorithm ",
                     peers[peer].refusal == kHostMemory
                         ? "needs CUDA device buffers on every rank, but rank " +
                               std::to_string(peer) + " passed host memory"
                         : "cannot run an alltoall in place (rank " + std::to_string(peer) +
                               "'s is; without naming cuda_ipc it is staged)"),
        peer);
  }
  buffers.send.resize(p);
  buffers.recv.resize(p);
  buffers.block_from.resize(p);
  buffers.block_bytes.resize(p);
  for (int peer = 0; peer < p; ++peer) {
    const Descriptor& d = peers[peer];
    CHORUS_ASSIGN_OR_RETURN(char* send, PeerBuffer(ctx, *buffers.runtime, buffers.device, peer, d,
                                                   d.send_address, d.send));
    buffers.send[peer] = send;
    CHORUS_ASSIGN_OR_RETURN(buffers.recv[peer], PeerBuffer(ctx, *buffers.runtime, buffers.device,
                                                           peer, d, d.recv_address, d.recv));
    buffers.block_from[peer] = send == nullptr ? nullptr : send + d.block_at;
    buffers.block_bytes[peer] = d.block_bytes;
  }
  return buffers;
}

// Queues out = the reduction of `count` elements at `at` bytes into every rank's input, rank
// `first`'s input first: when `out` is that input (in place), it is read before it is
// overwritten, and never again.
absl::Status ReduceBlock(const CollectiveArgs& args, const PeerBuffers& b, int first, size_t at,
                         size_t count, char* out) {
  if (count == 0) return absl::OkStatus();
  const int p = static_cast<int>(b.send.size());
  const char* accumulated = b.send[first] + at;
  for (int peer = 0; peer < p; ++peer) {
    if (peer == first) continue;
    CHORUS_RETURN_IF_ERROR(b.runtime->ReduceAsync(
        args.type, args.op, accumulated, b.send[peer] + at, out, count, b.device, b.stream));
    accumulated = out;
  }
  if (args.op != ReduceOp::kAvg) return absl::OkStatus();
  return b.runtime->DivideAsync(args.type, out, count, p, b.device, b.stream);
}

// OnDevice for an error once work is queued on the stream: the work is let finish (within the
// deadline) first, so that none of it reads or writes a peer's memory after this rank has left.
absl::Status OnQueued(CollectiveContext& ctx, const PeerBuffers& b, const absl::Status& status) {
  if (status.ok()) return status;
  b.runtime->WaitStream(b.device, b.stream, ctx.deadline()).IgnoreError();
  return OnDevice(ctx, status);
}

// Waits for the work this rank queued; nothing to wait for on a rank without buffers.
absl::Status WaitQueued(CollectiveContext& ctx, const PeerBuffers& b) {
  if (b.device < 0) return absl::OkStatus();
  return OnQueued(ctx, b, b.runtime->WaitStream(b.device, b.stream, ctx.deadline()));
}

// Queues a device copy unless it is empty or onto itself.
absl::Status Copy(const PeerBuffers& b, char* dst, const char* src, size_t bytes) {
  if (bytes == 0 || dst == src) return absl::OkStatus();
  return b.runtime->CopyAsync(dst, src, bytes, b.device, b.stream);
}

// Step 3: the queued work done, every rank done reading.
absl::Status Finish(CollectiveContext& ctx, const PeerBuffers& b) {
  CHORUS_RETURN_IF_ERROR(WaitQueued(ctx, b));
  return Notify(ctx, kDoneReading);
}

}  // namespace

bool CudaIpcCanRun(const CollectiveArgs& args, int rank) {
  return !(args.kind == CollectiveKind::kAllToAll || args.kind == CollectiveKind::kAllToAllV) ||
         !IsInPlace(args, rank);
}

absl::Status CudaIpcAllReduce(CollectiveContext& ctx, const CollectiveArgs& args) {
  // Every rank agrees on the count (the header checks it); empty buffers have no placement.
  if (args.count == 0) return absl::OkStatus();
  CHORUS_ASSIGN_OR_RETURN(const PeerBuffers b, ExchangeBuffers(ctx, args));
  const int p = ctx.size();
  const int r = ctx.rank();
  const size_t elem = args.elem();
  const std::vector<size_t> counts = EvenCounts(args.count, p);
  const std::vector<size_t> offsets = PackedOffsets(counts);
  CHORUS_RETURN_IF_ERROR(OnQueued(
      ctx, b,
      ReduceBlock(args, b, r, offsets[r] * elem, counts[r], b.recv[r] + offsets[r] * elem)));
  CHORUS_RETURN_IF_ERROR(WaitQueued(ctx, b));
  CHORUS_RETURN_IF_ERROR(Notify(ctx, kReduced));
  for (int peer = 0; peer < p; ++peer) {
    if (peer == r) continue;
    const size_t at = offsets[peer] * elem;
    CHORUS_RETURN_IF_ERROR(
        OnQueued(ctx, b, Copy(b, b.recv[r] + at, b.recv[peer] + at, counts[peer] * elem)));
  }
  return Finish(ctx, b);
}

absl::Status CudaIpcReduce(CollectiveContext& ctx, const CollectiveArgs& args) {
  if (args.count == 0) return absl::OkStatus();
  CHORUS_ASSIGN_OR_RETURN(const PeerBuffers b, ExchangeBuffers(ctx, args));
  // Rank r reduces block r of every input into the root's output, starting from the root's
  // input: in place, that is the output.
  const int r = ctx.rank();
  const size_t elem = args.elem();
  const std::vector<size_t> counts = EvenCounts(args.count, ctx.size());
  const size_t at = PackedOffsets(counts)[r] * elem;
  CHORUS_RETURN_IF_ERROR(
      OnQueued(ctx, b, ReduceBlock(args, b, args.root, at, counts[r], b.recv[args.root] + at)));
  return Finish(ctx, b);
}

absl::Status CudaIpcReduceScatter(CollectiveContext& ctx, const CollectiveArgs& args) {
  // reduce_scatter: blocks of `count`; reduce_scatterv: of counts[r], packed.
  const int r = ctx.rank();
  const std::vector<size_t> counts =
      args.counts.empty() ? std::vector<size_t>(ctx.size(), args.count) : args.counts;
  const std::vector<size_t> offsets = PackedOffsets(counts);
  if (offsets.back() == 0) return absl::OkStatus();
  CHORUS_ASSIGN_OR_RETURN(const PeerBuffers b, ExchangeBuffers(ctx, args));
  CHORUS_RETURN_IF_ERROR(
      OnQueued(ctx, b, ReduceBlock(args, b, r, offsets[r] * args.elem(), counts[r], b.recv[r])));
  return Finish(ctx, b);
}

absl::Status CudaIpcMove(CollectiveContext& ctx, const CollectiveArgs& args) {
  // An empty collective has no placement, and no rank moves anything.
  if (PayloadBytes(args, ctx.size()) == 0) return absl::OkStatus();
  CHORUS_ASSIGN_OR_RETURN(const PeerBuffers b, ExchangeBuffers(ctx, args));
  const int p = ctx.size();
  const int r = ctx.rank();
  const size_t elem = args.elem();
  const BufferElements mine = ElementsOf(args, r, p);
  const RankLayout recv_blocks = RecvBlocks(args, p);
  std::vector<Block> into(p);
  for (int peer = 0; peer < p; ++peer) {
    into[peer] = DestinationBlock(args, mine, recv_blocks, peer);
    if (into[peer].count * elem != b.block_bytes[peer]) {
      // Counts that only this rank can compare (gatherv, scatterv, alltoallv): every rank must
      // learn of it, not only this one. Nothing is queued yet.
      return ctx.Break(MismatchError(
          absl::StrCat(ctx.Describe(), ": rank ", peer, " holds ", b.block_bytes[peer],
                       " bytes for rank ", r, ", which expects ", into[peer].count * elem,
                       "; every rank must pass counts that match the other ranks' (the same "
                       "collective with the same arguments)"),
          peer));
    }
  }
  for (int peer = 0; peer < p; ++peer) {
    CHORUS_RETURN_IF_ERROR(OnQueued(
        ctx, b,
        Copy(b, b.recv[r] + into[peer].at * elem, b.block_from[peer], into[peer].count * elem)));
  }
  return Finish(ctx, b);
}

}  // namespace chorus
