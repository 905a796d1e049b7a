// Allreduce of CUDA device buffers between the ranks of one host, read in place through CUDA IPC:
// no copy through host memory and no byte on a transport, only three small messages to each peer.
//
//   1. Each rank waits for the work queued on its stream (its input is ready), then sends every
//      peer a descriptor: its process, device and the IPC handles of its buffers.
//   2. Rank r reduces block r of every rank's input into block r of its own output, reading the
//      peers' inputs in their memory (device kernels on the caller's stream), and tells every
//      peer when its block is done.
//   3. Rank r copies every other block q from rank q's output, then tells every peer that it has
//      stopped reading their memory; it returns only once each peer has said the same, so no
//      rank's buffers change while another still reads them.
//
// A rank whose buffers are host memory sends a descriptor saying so; every rank then fails with
// kInvalidArgument naming it, instead of some ranks waiting for it.
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chorus/collectives/algorithms/algorithms.h"
#include "chorus/cuda/gpu_runtime.h"

namespace chorus {
namespace {

// Steps of the three message rounds.
enum Step : uint64_t { kDescriptors = 0, kReduced = 1, kDoneReading = 2 };

// What a rank tells its peers about its buffers. Plain bytes on the wire between processes of
// one host (same build, same byte order).
struct Descriptor {
  int32_t on_device = 0;  // 0: host buffers (the call cannot run)
  int32_t device = -1;
  int64_t pid = 0;
  uint64_t send_address = 0;  // in the rank's own process
  uint64_t recv_address = 0;
  IpcMemory send;
  IpcMemory recv;
};

// The address of a peer's buffer in this process: its own address when the peer is this process
// (CUDA refuses to open a process's own handles), else its IPC handle opened.
absl::StatusOr<char*> PeerBuffer(GpuRuntime& runtime, int device, const Descriptor& peer,
                                 uint64_t address, const IpcMemory& memory) {
  if (peer.pid == getpid()) return reinterpret_cast<char*>(address);
  CHORUS_ASSIGN_OR_RETURN(void* opened, runtime.OpenMemory(device, memory));
  return static_cast<char*>(opened);
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

}  // namespace

absl::Status CudaIpcAllReduce(CollectiveContext& ctx, const CollectiveArgs& args) {
  // Every rank agrees on the count (the header checks it); empty buffers have no placement.
  if (args.count == 0) return absl::OkStatus();
  const int p = ctx.size();
  const int r = ctx.rank();
  GpuRuntime* runtime = InstalledGpuRuntime();
  const bool on_device = args.cuda_device >= 0 && runtime != nullptr;
  const int device = args.cuda_device;
  void* const stream = args.cuda_stream;

  Descriptor mine;
  mine.pid = getpid();
  if (on_device) {
    mine.on_device = 1;
    mine.device = device;
    mine.send_address = reinterpret_cast<uint64_t>(args.send);
    mine.recv_address = reinterpret_cast<uint64_t>(args.recv);
    // The input must be complete before a peer reads it.
    CHORUS_RETURN_IF_ERROR(runtime->WaitStream(device, stream, ctx.deadline()));
    CHORUS_ASSIGN_OR_RETURN(mine.send, runtime->ExportMemory(device, args.send));
    CHORUS_ASSIGN_OR_RETURN(mine.recv, runtime->ExportMemory(device, args.recv));
  }
  std::vector<Descriptor> peers(p);
  {
    std::vector<Transfer> transfers;
    for (int peer = 0; peer < p; ++peer) {
      if (peer == r) continue;
      transfers.push_back(ctx.Recv(peer, kDescriptors, &peers[peer], sizeof(Descriptor)));
      transfers.push_back(ctx.Send(peer, kDescriptors, &mine, sizeof(Descriptor)));
    }
    CHORUS_RETURN_IF_ERROR(ctx.WaitAll(transfers));
  }
  peers[r] = mine;
  for (int peer = 0; peer < p; ++peer) {
    if (!peers[peer].on_device) {
      return InvalidArgumentError(
          absl::StrCat("the cuda_ipc algorithm needs CUDA device buffers on every rank, but rank ",
                       peer, " passed host memory"));
    }
  }
  // Every rank's input and output in this process.
  std::vector<const char*> inputs(p);
  std::vector<char*> outputs(p);
  for (int peer = 0; peer < p; ++peer) {
    const Descriptor& d = peers[peer];
    CHORUS_ASSIGN_OR_RETURN(char* in, PeerBuffer(*runtime, device, d, d.send_address, d.send));
    CHORUS_ASSIGN_OR_RETURN(outputs[peer], PeerBuffer(*runtime, device, d, d.recv_address, d.recv));
    inputs[peer] = in;
  }

  const size_t elem = args.elem();
  const std::vector<size_t> counts = EvenCounts(args.count, p);
  const std::vector<size_t> offsets = PackedOffsets(counts);
  const size_t at = offsets[r] * elem;
  char* own = outputs[r] + at;
  if (counts[r] > 0) {
    // This rank's own input first: in place, `own` is that input, which must be read before it
    // is overwritten.
    const char* accumulated = inputs[r] + at;
    for (int peer = 0; peer < p; ++peer) {
      if (peer == r) continue;
      CHORUS_RETURN_IF_ERROR(runtime->ReduceAsync(
          args.type, args.op, accumulated, inputs[peer] + at, own, counts[r], device, stream));
      accumulated = own;
    }
    if (args.op == ReduceOp::kAvg) {
      CHORUS_RETURN_IF_ERROR(runtime->DivideAsync(args.type, own, counts[r], p, device, stream));
    }
  }
  CHORUS_RETURN_IF_ERROR(runtime->WaitStream(device, stream, ctx.deadline()));
  CHORUS_RETURN_IF_ERROR(Notify(ctx, kReduced));

  for (int peer = 0; peer < p; ++peer) {
    if (peer == r || counts[peer] == 0) continue;
    const size_t peer_at = offsets[peer] * elem;
    CHORUS_RETURN_IF_ERROR(runtime->CopyAsync(outputs[r] + peer_at, outputs[peer] + peer_at,
                                              counts[peer] * elem, device, stream));
  }
  CHORUS_RETURN_IF_ERROR(runtime->WaitStream(device, stream, ctx.deadline()));
  return Notify(ctx, kDoneReading);
}

}  // namespace chorus
