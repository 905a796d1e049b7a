// Collectives on CUDA device buffers between the ranks of one host, read in place through CUDA
// IPC: no copy through host memory and no byte on a transport, only a few small messages to each
// peer.
//
//   1. Each rank waits for the work queued on its stream (its input is ready), then sends every
//      peer a descriptor: its process, device and the IPC handles of its buffers.
//   2. Each rank computes its own output from the peers' buffers where they are: device kernels
//      and device-to-device copies on the caller's stream. The allreduce first reduces its block
//      of every rank's input into its own output and tells every peer when that block is done;
//      then it copies the other blocks from their owners' outputs.
//   3. Each rank tells every peer that it has stopped reading their memory, and returns only once
//      each peer has said the same, so no rank's buffers change while another still reads them.
//
// A rank whose buffers are host memory sends a descriptor saying so; every rank then fails with
// kInvalidArgument naming it, instead of some ranks waiting for it.
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

// What a rank tells its peers about its buffers. Plain bytes on the wire between processes of
// one host (same build, same byte order).
struct Descriptor {
  int32_t on_device = 0;  // 0: host buffers (the call cannot run)
  int32_t device = -1;
  int64_t pid = 0;
  uint64_t send_address = 0;  // in the rank's own process; 0: no such buffer on that rank
  uint64_t recv_address = 0;
  IpcMemory send;
  IpcMemory recv;
};

// Every rank's buffers, as addresses in this process (null where a rank has none).
struct PeerBuffers {
  GpuRuntime* runtime = nullptr;
  int device = -1;
  void* stream = nullptr;
  std::vector<const char*> send;
  std::vector<char*> recv;
};

// A GPU runtime's error as the collective's: its description first. (Errors of the messages come
// from the context, which describes them itself.)
absl::Status OnDevice(const CollectiveContext& ctx, const absl::Status& status) {
  if (status.ok()) return status;
  return MakeError(GetErrorKind(status), absl::StrCat(ctx.Describe(), ": ", status.message()));
}

// The address of rank `rank`'s buffer in this process: its own address when that rank is this
// process (CUDA refuses to open a process's own handles), else its IPC handle opened.
absl::StatusOr<char*> PeerBuffer(const CollectiveContext& ctx, GpuRuntime& runtime, int device,
                                 int rank, const Descriptor& peer, uint64_t address,
                                 const IpcMemory& memory) {
  if (address == 0) return nullptr;
  if (peer.pid == getpid()) return reinterpret_cast<char*>(address);
  absl::StatusOr<void*> opened = runtime.OpenMemory(device, memory);
  if (!opened.ok()) {
    return MakeError(GetErrorKind(opened.status()),
                     absl::StrCat(ctx.Describe(), ": opening rank ", rank,
                                  "'s buffer through CUDA IPC: ", opened.status().message()),
                     rank);
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

// Step 1: waits for this rank's stream, exchanges descriptors and opens the peers' buffers.
absl::StatusOr<PeerBuffers> ExchangeBuffers(CollectiveContext& ctx, const CollectiveArgs& args) {
  const int p = ctx.size();
  const int r = ctx.rank();
  PeerBuffers buffers;
  buffers.runtime = InstalledGpuRuntime();
  buffers.device = args.cuda_device;
  buffers.stream = args.cuda_stream;
  const BufferElements elements = ElementsOf(args, r, p);
  Descriptor mine;
  mine.pid = getpid();
  if (args.cuda_device >= 0 && buffers.runtime != nullptr) {
    GpuRuntime& runtime = *buffers.runtime;
    mine.on_device = 1;
    mine.device = args.cuda_device;
    // The input must be complete before a peer reads it.
    CHORUS_RETURN_IF_ERROR(
        OnDevice(ctx, runtime.WaitStream(buffers.device, buffers.stream, ctx.deadline())));
    if (elements.send > 0) {
      mine.send_address = reinterpret_cast<uint64_t>(args.send);
      absl::StatusOr<IpcMemory> send = runtime.ExportMemory(buffers.device, args.send);
      CHORUS_RETURN_IF_ERROR(OnDevice(ctx, send.status()));
      mine.send = *send;
    }
    if (elements.recv > 0) {
      mine.recv_address = reinterpret_cast<uint64_t>(args.recv);
      absl::StatusOr<IpcMemory> recv = runtime.ExportMemory(buffers.device, args.recv);
      CHORUS_RETURN_IF_ERROR(OnDevice(ctx, recv.status()));
      mine.recv = *recv;
    }
  }
  std::vector<Descriptor> peers(p);
  std::vector<Transfer> transfers;
  for (int peer = 0; peer < p; ++peer) {
    if (peer == r) continue;
    transfers.push_back(ctx.Recv(peer, kDescriptors, &peers[peer], sizeof(Descriptor)));
    transfers.push_back(ctx.Send(peer, kDescriptors, &mine, sizeof(Descriptor)));
  }
  CHORUS_RETURN_IF_ERROR(ctx.WaitAll(transfers));
  peers[r] = mine;
  for (int peer = 0; peer < p; ++peer) {
    if (!peers[peer].on_device) {
      return MakeError(ErrorKind::kInvalidArgument,
                       absl::StrCat(ctx.Describe(),
                                    ": the cuda_ipc algorithm needs CUDA device buffers on every "
                                    "rank, but rank ",
                                    peer, " passed host memory"),
                       peer);
    }
  }
  buffers.send.resize(p);
  buffers.recv.resize(p);
  for (int peer = 0; peer < p; ++peer) {
    const Descriptor& d = peers[peer];
    CHORUS_ASSIGN_OR_RETURN(char* send, PeerBuffer(ctx, *buffers.runtime, buffers.device, peer, d,
                                                   d.send_address, d.send));
    buffers.send[peer] = send;
    CHORUS_ASSIGN_OR_RETURN(buffers.recv[peer], PeerBuffer(ctx, *buffers.runtime, buffers.device,
                                                           peer, d, d.recv_address, d.recv));
  }
  return buffers;
}

// Queues out = the reduction of `count` elements at `at` bytes into every rank's input, this
// rank's own input first: in place, `out` is that input, which must be read before it is
// overwritten.
absl::Status ReduceBlock(const CollectiveArgs& args, const PeerBuffers& b, int rank, size_t at,
                         size_t count, char* out) {
  if (count == 0) return absl::OkStatus();
  const int p = static_cast<int>(b.send.size());
  const char* accumulated = b.send[rank] + at;
  for (int peer = 0; peer < p; ++peer) {
    if (peer == rank) continue;
    CHORUS_RETURN_IF_ERROR(b.runtime->ReduceAsync(
        args.type, args.op, accumulated, b.send[peer] + at, out, count, b.device, b.stream));
    accumulated = out;
  }
  if (args.op != ReduceOp::kAvg) return absl::OkStatus();
  return b.runtime->DivideAsync(args.type, out, count, p, b.device, b.stream);
}

// Queues a device copy unless it is empty or onto itself.
absl::Status Copy(const PeerBuffers& b, char* dst, const char* src, size_t bytes) {
  if (bytes == 0 || dst == src) return absl::OkStatus();
  return b.runtime->CopyAsync(dst, src, bytes, b.device, b.stream);
}

// Step 3: the queued work done, every rank done reading.
absl::Status Finish(CollectiveContext& ctx, const PeerBuffers& b) {
  CHORUS_RETURN_IF_ERROR(OnDevice(ctx, b.runtime->WaitStream(b.device, b.stream, ctx.deadline())));
  return Notify(ctx, kDoneReading);
}

}  // namespace

absl::Status CudaIpcAllReduce(CollectiveContext& ctx, const CollectiveArgs& args) {
  // Every rank agrees on the count (the header checks it); empty buffers have no placement.
  if (args.count == 0) return absl::OkStatus();
  CHORUS_ASSIGN_OR_RETURN(const PeerBuffers b, ExchangeBuffers(ctx, args));
  const int p = ctx.size();
  const int r = ctx.rank();
  const size_t elem = args.elem();
  const std::vector<size_t> counts = EvenCounts(args.count, p);
  const std::vector<size_t> offsets = PackedOffsets(counts);
  CHORUS_RETURN_IF_ERROR(OnDevice(
      ctx, ReduceBlock(args, b, r, offsets[r] * elem, counts[r], b.recv[r] + offsets[r] * elem)));
  CHORUS_RETURN_IF_ERROR(OnDevice(ctx, b.runtime->WaitStream(b.device, b.stream, ctx.deadline())));
  CHORUS_RETURN_IF_ERROR(Notify(ctx, kReduced));
  for (int peer = 0; peer < p; ++peer) {
    if (peer == r) continue;
    const size_t at = offsets[peer] * elem;
    CHORUS_RETURN_IF_ERROR(
        OnDevice(ctx, Copy(b, b.recv[r] + at, b.recv[peer] + at, counts[peer] * elem)));
  }
  return Finish(ctx, b);
}

absl::Status CudaIpcReduceScatter(CollectiveContext& ctx, const CollectiveArgs& args) {
  if (args.count == 0) return absl::OkStatus();
  CHORUS_ASSIGN_OR_RETURN(const PeerBuffers b, ExchangeBuffers(ctx, args));
  const int r = ctx.rank();
  CHORUS_RETURN_IF_ERROR(
      OnDevice(ctx, ReduceBlock(args, b, r, r * args.count * args.elem(), args.count, b.recv[r])));
  return Finish(ctx, b);
}

absl::Status CudaIpcAllGather(CollectiveContext& ctx, const CollectiveArgs& args) {
  if (args.count == 0) return absl::OkStatus();
  CHORUS_ASSIGN_OR_RETURN(const PeerBuffers b, ExchangeBuffers(ctx, args));
  const int r = ctx.rank();
  const size_t bytes = args.count * args.elem();
  for (int peer = 0; peer < ctx.size(); ++peer) {
    // In place, a rank's own block is already where it goes (Copy skips it).
    CHORUS_RETURN_IF_ERROR(OnDevice(ctx, Copy(b, b.recv[r] + peer * bytes, b.send[peer], bytes)));
  }
  return Finish(ctx, b);
}

absl::Status CudaIpcBroadcast(CollectiveContext& ctx, const CollectiveArgs& args) {
  if (args.count == 0) return absl::OkStatus();
  CHORUS_ASSIGN_OR_RETURN(const PeerBuffers b, ExchangeBuffers(ctx, args));
  const int r = ctx.rank();
  CHORUS_RETURN_IF_ERROR(
      OnDevice(ctx, Copy(b, b.recv[r], b.send[args.root], args.count * args.elem())));
  return Finish(ctx, b);
}

}  // namespace chorus
