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
// A rank that cannot take part (host memory, an alltoall in place, memory CUDA cannot share, an
// input not ready by the deadline) says so in its descriptor, and every rank fails alike. A
// failure after the descriptors (a buffer that cannot be opened, a kernel or copy that fails,
// block sizes that disagree, which only one rank can see) stops the rank's own work, but it
// still takes part in every round and says in its round message that it failed: every rank
// then fails naming it, none leaves while a peer may still use its memory, and the
// communicator stays usable.
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "chorus/collectives/algorithms/algorithms.h"
#include "chorus/collectives/shape.h"
#include "chorus/cuda/gpu_runtime.h"

namespace chorus {
namespace {

// Steps of the message rounds.
enum Step : uint64_t { kDescriptors = 0, kReduced = 1, kDoneReading = 2 };

// Why a rank cannot take part, as its descriptor says.
enum Refusal : int32_t {
  kTakesPart = 0,
  kHostMemory = 1,
  kInPlaceExchange = 2,
  kCannotShare = 3,  // exporting an IPC handle failed (pool or managed memory, say)
  kNotReady = 4,     // waiting for its stream failed (a CUDA error, or the deadline)
};

// What a rank says in each round after the descriptors.
enum Outcome : uint8_t { kWentOn = 1, kDisagreed = 2, kFailed = 3 };

// What a rank tells one peer about its buffers. Plain bytes on the wire between processes of one
// host (same build, same byte order).
struct Descriptor {
  int32_t refusal = kTakesPart;
  int32_t device = -1;
  int64_t pid = 0;
  uint64_t process = 0;       // ProcessToken(): with the pid, says whether addresses are shared
  uint64_t send_address = 0;  // in the rank's own process; 0: no such buffer on that rank
  uint64_t recv_address = 0;
  // The bytes of the send buffer that go to this peer, from `block_at` (moving collectives).
  uint64_t block_at = 0;
  uint64_t block_bytes = 0;
  IpcMemory send;
  IpcMemory recv;
};

// A random number per process: pids alone repeat across pid namespaces (containers).
uint64_t ProcessToken() {
  static const uint64_t token = absl::Uniform<uint64_t>(absl::BitGen());
  return token;
}

// `bytes` into a buffer that may be absent (null then: the work that would use it is not queued).
char* At(char* base, size_t bytes) { return base == nullptr ? nullptr : base + bytes; }
const char* At(const char* base, size_t bytes) { return base == nullptr ? nullptr : base + bytes; }

// A block of a buffer, in elements.
struct Block {
  size_t at = 0;
  size_t count = 0;
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

// An alltoall in place cannot read the peers' buffers where they are: the block a rank writes is
// one a peer still reads.
bool InPlaceExchange(const CollectiveArgs& args, int rank) {
  return (args.kind == CollectiveKind::kAllToAll || args.kind == CollectiveKind::kAllToAllV) &&
         IsInPlace(args, rank);
}

// Whether rank r's call can end at once on every rank: nothing to move, by counts every rank
// knows alike (not gatherv, scatterv and alltoallv, whose sizes only some ranks know).
bool NothingToDo(const CollectiveContext& ctx, const CollectiveArgs& args) {
  return AgreedCounts(args.kind) != Agreement::kNone && PayloadBytes(args, ctx.size()) == 0;
}

// One rank's part of one collective: the peers' buffers as addresses in this process (null
// where a rank has none), each peer's block for this rank, and the first failure of this rank's
// own, after which it queues nothing more but still takes part in every round.
class IpcCall {
 public:
  IpcCall(CollectiveContext& ctx, const CollectiveArgs& args)
      : ctx_(ctx),
        args_(args),
        runtime_(InstalledGpuRuntime()),
        p_(ctx.size()),
        r_(ctx.rank()),
        send_(p_),
        recv_(p_),
        block_from_(p_),
        block_bytes_(p_) {}
  // Releases the peers' buffers it opened once no work of this call can still use them: after
  // a wait for the stream that followed the last work queued. Otherwise (the wait failed or
  // never came) they stay open for the rest of the process, never closed under running work.
  ~IpcCall() {
    if (!stream_idle_) return;
    for (const IpcMemory& memory : opened_) runtime_->ReleaseMemory(memory);
  }
  IpcCall(const IpcCall&) = delete;
  IpcCall& operator=(const IpcCall&) = delete;

  const CollectiveArgs& args() const { return args_; }
  int rank() const { return r_; }
  int size() const { return p_; }
  bool working() const { return failure_.ok(); }
  const char* send(int rank) const { return send_[rank]; }
  char* recv(int rank) const { return recv_[rank]; }
  const char* block_from(int rank) const { return block_from_[rank]; }
  size_t block_bytes(int rank) const { return block_bytes_[rank]; }

  // Step 1. An error here ends the call on every rank alike (a refusal some rank's descriptor
  // carries, or a failed transfer).
  absl::Status Exchange();

  // Records the first failure of this rank's own work (described here).
  void Fail(const absl::Status& status) {
    if (status.ok() || !failure_.ok()) return;
    failure_ =
        MakeError(GetErrorKind(status), absl::StrCat(ctx_.Describe(), ": ", status.message()),
                  ErrorPeerRank(status).value_or(-1));
  }

  // Queued work, none once this rank has failed.
  void Reduce(int first, size_t at, size_t count, char* out);
  void Copy(char* dst, const char* src, size_t bytes);

  // The work queued so far done, then a round: this rank's outcome to every peer, and theirs.
  absl::Status Round(Step step);

  // After the last round: OK, this rank's failure, or the first failure a peer reported.
  absl::Status Result() const;

 private:
  absl::StatusOr<std::vector<Descriptor>> Describe();
  absl::StatusOr<char*> Open(int rank, const Descriptor& peer, uint64_t address,
                             const IpcMemory& memory);

  CollectiveContext& ctx_;
  const CollectiveArgs& args_;
  GpuRuntime* const runtime_;
  const int p_;
  const int r_;
  int device_ = -1;  // -1: this rank has no buffers, and no work
  std::vector<const char*> send_;
  std::vector<char*> recv_;
  std::vector<const char*> block_from_;
  std::vector<size_t> block_bytes_;
  std::vector<IpcMemory> opened_;  // by OpenMemory, each to be released once
  bool stream_idle_ = true;        // no work queued since the last successful wait
  absl::Status failure_;
  int failed_peer_ = -1;  // the first peer that reported a failure
  Outcome failed_peer_outcome_ = kWentOn;
};

absl::StatusOr<std::vector<Descriptor>> IpcCall::Describe() {
  const BufferElements elements = ElementsOf(args_, r_, p_);
  Descriptor mine;
  mine.pid = getpid();
  mine.process = ProcessToken();
  if (elements.send == 0 && elements.recv == 0) {
    // Nothing to read or write here (a v-collective's empty block): no placement to check, and
    // no peer reads from this rank.
  } else if (args_.cuda_device < 0 || runtime_ == nullptr) {
    mine.refusal = kHostMemory;
  } else if (InPlaceExchange(args_, r_)) {
    mine.refusal = kInPlaceExchange;
  } else {
    // The input must be complete before a peer reads it.
    Fail(runtime_->WaitStream(args_.cuda_device, args_.cuda_stream, ctx_.deadline()));
    if (!working()) mine.refusal = kNotReady;
    auto share = [&](const void* buffer, size_t elements, uint64_t& address, IpcMemory& memory) {
      if (mine.refusal != kTakesPart || elements == 0) return;
      absl::StatusOr<IpcMemory> exported = runtime_->ExportMemory(args_.cuda_device, buffer);
      Fail(exported.status());
      if (!exported.ok()) {
        mine.refusal = kCannotShare;
        return;
      }
      address = reinterpret_cast<uint64_t>(buffer);
      memory = *exported;
    };
    share(args_.send, elements.send, mine.send_address, mine.send);
    share(args_.recv, elements.recv, mine.recv_address, mine.recv);
    if (mine.refusal == kTakesPart) {
      mine.device = args_.cuda_device;
      device_ = args_.cuda_device;
    }
  }
  std::vector<Descriptor> descriptors(p_, mine);
  if (IsReduction(args_.kind)) return descriptors;
  const RankLayout send_blocks = SendBlocks(args_, p_);
  for (int peer = 0; peer < p_; ++peer) {
    const Block block = SourceBlock(args_, elements, send_blocks, peer);
    descriptors[peer].block_at = block.at * args_.elem();
    descriptors[peer].block_bytes = block.count * args_.elem();
  }
  return descriptors;
}

absl::StatusOr<char*> IpcCall::Open(int rank, const Descriptor& peer, uint64_t address,
                                    const IpcMemory& memory) {
  if (address == 0) return nullptr;
  // A rank of this process: its own address (CUDA refuses to open a process's own handles),
  // which this rank's kernels reach only with peer access when it is on another GPU.
  if (peer.pid == getpid() && peer.process == ProcessToken()) {
    const absl::Status access = runtime_->EnablePeerAccess(device_, peer.device);
    if (!access.ok()) {
      return MakeError(GetErrorKind(access),
                       absl::StrCat("reading rank ", rank, "'s buffer on GPU ", peer.device,
                                    " from GPU ", device_, ": ", access.message(),
                                    "; set CHORUS_CUDA_IPC=0 (and name no cuda_ipc) to stage "
                                    "device buffers instead"),
                       rank);
    }
    return reinterpret_cast<char*>(address);
  }
  absl::StatusOr<void*> opened = runtime_->OpenMemory(device_, memory);
  if (!opened.ok()) {
    return MakeError(GetErrorKind(opened.status()),
                     absl::StrCat("opening rank ", rank,
                                  "'s buffer through CUDA IPC: ", opened.status().message()),
                     rank);
  }
  opened_.push_back(memory);
  return static_cast<char*>(*opened);
}

absl::Status IpcCall::Exchange() {
  CHORUS_ASSIGN_OR_RETURN(std::vector<Descriptor> mine, Describe());
  std::vector<Descriptor> peers(p_);
  std::vector<Transfer> transfers;
  for (int peer = 0; peer < p_; ++peer) {
    if (peer == r_) continue;
    transfers.push_back(ctx_.Recv(peer, kDescriptors, &peers[peer], sizeof(Descriptor)));
    transfers.push_back(ctx_.Send(peer, kDescriptors, &mine[peer], sizeof(Descriptor)));
  }
  CHORUS_RETURN_IF_ERROR(ctx_.WaitAll(transfers));
  peers[r_] = mine[r_];
  for (int peer = 0; peer < p_; ++peer) {
    const int32_t refusal = peers[peer].refusal;
    if (refusal == kTakesPart) continue;
    if (peer == r_ && !failure_.ok()) return failure_;  // this rank's own error says why
    const std::string who = absl::StrCat("rank ", peer);
    std::string why;
    ErrorKind kind = ErrorKind::kInvalidArgument;
    switch (refusal) {
      case kHostMemory:
        why = "needs CUDA device buffers on every rank, but " + who + " passed host memory";
        break;
      case kInPlaceExchange:
        why = "cannot run an alltoall in place (" + who +
              "'s is; without naming cuda_ipc it is staged)";
        break;
      case kCannotShare:
        why = "cannot share " + who +
              "'s buffers through CUDA IPC (memory from a pool, or managed memory? its error "
              "says more): pass cudaMalloc memory, or set CHORUS_CUDA_IPC=0 to stage device "
              "buffers";
        break;
      default:
        kind = ErrorKind::kAborted;
        why = "stopped: " + who + " could not make its input ready (its error says why)";
        break;
    }
    return MakeError(kind, absl::StrCat(ctx_.Describe(), ": the cuda_ipc algorithm ", why), peer);
  }
  if (device_ < 0) return absl::OkStatus();  // no buffers here: nothing to open
  const bool reads_outputs =
      args_.kind == CollectiveKind::kAllReduce || args_.kind == CollectiveKind::kReduce;
  for (int peer = 0; peer < p_ && working(); ++peer) {
    const Descriptor& d = peers[peer];
    absl::StatusOr<char*> send = Open(peer, d, d.send_address, d.send);
    Fail(send.status());
    if (!send.ok()) break;
    send_[peer] = *send;
    block_from_[peer] = At(*send, d.block_at);
    block_bytes_[peer] = d.block_bytes;
    // Every rank writes its own output; the allreduce reads every output, the reduce writes
    // the root's.
    if (!reads_outputs && peer != r_) continue;
    absl::StatusOr<char*> recv = Open(peer, d, d.recv_address, d.recv);
    Fail(recv.status());
    if (recv.ok()) recv_[peer] = *recv;
  }
  return absl::OkStatus();
}

void IpcCall::Reduce(int first, size_t at, size_t count, char* out) {
  // out = the reduction of `count` elements at `at` bytes into every rank's input, rank
  // `first`'s input first: when `out` is that input (in place), it is read before it is
  // overwritten, and never again.
  if (!working() || count == 0) return;
  // One kernel reads every input once and writes `out` once (averaging too).
  absl::InlinedVector<const void*, 16> inputs;
  inputs.push_back(At(send_[first], at));
  for (int peer = 0; peer < p_; ++peer) {
    if (peer != first) inputs.push_back(At(send_[peer], at));
  }
  stream_idle_ = false;
  Fail(runtime_->ReduceAsync(args_.type, args_.op, inputs, out, count, device_, args_.cuda_stream));
}

void IpcCall::Copy(char* dst, const char* src, size_t bytes) {
  if (!working() || bytes == 0 || dst == src) return;
  stream_idle_ = false;
  Fail(runtime_->CopyAsync(dst, src, bytes, device_, args_.cuda_stream));
}

absl::Status IpcCall::Round(Step step) {
  // Whatever was queued finishes before the peers hear from this rank, failed or not: none of
  // it touches a peer's memory afterwards.
  if (device_ >= 0) {
    const absl::Status waited = runtime_->WaitStream(device_, args_.cuda_stream, ctx_.deadline());
    if (waited.ok()) stream_idle_ = true;
    Fail(waited);
  }
  const uint8_t outcome = working()                                        ? kWentOn
                          : GetErrorKind(failure_) == ErrorKind::kMismatch ? kDisagreed
                                                                           : kFailed;
  std::vector<uint8_t> got(p_, kWentOn);
  std::vector<Transfer> transfers;
  for (int peer = 0; peer < p_; ++peer) {
    if (peer == r_) continue;
    transfers.push_back(ctx_.Recv(peer, step, &got[peer], 1));
    transfers.push_back(ctx_.Send(peer, step, &outcome, 1));
  }
  CHORUS_RETURN_IF_ERROR(ctx_.WaitAll(transfers));
  for (int peer = 0; peer < p_ && failed_peer_ < 0; ++peer) {
    if (got[peer] == kWentOn) continue;
    failed_peer_ = peer;
    failed_peer_outcome_ = got[peer] == kDisagreed ? kDisagreed : kFailed;
  }
  return absl::OkStatus();
}

absl::Status IpcCall::Result() const {
  if (!failure_.ok()) return failure_;
  if (failed_peer_ < 0) return absl::OkStatus();
  if (failed_peer_outcome_ == kDisagreed) {
    return MismatchError(
        absl::StrCat(ctx_.Describe(), ": rank ", failed_peer_,
                     " found that the ranks' counts disagree (its error names them); every rank "
                     "must pass counts that match the other ranks'"),
        failed_peer_);
  }
  return MakeError(ErrorKind::kAborted,
                   absl::StrCat(ctx_.Describe(), ": rank ", failed_peer_,
                                " failed in the cuda_ipc algorithm (its error says why)"),
                   failed_peer_);
}

// Steps 1 and 3 around `work`, which queues this rank's part (step 2) and may hold rounds of its
// own; ends at once on every rank alike when there is nothing to move.
absl::Status RunCall(CollectiveContext& ctx, const CollectiveArgs& args,
                     absl::FunctionRef<absl::Status(IpcCall&)> work) {
  if (NothingToDo(ctx, args)) return absl::OkStatus();
  IpcCall call(ctx, args);
  CHORUS_RETURN_IF_ERROR(call.Exchange());
  CHORUS_RETURN_IF_ERROR(work(call));
  CHORUS_RETURN_IF_ERROR(call.Round(kDoneReading));
  return call.Result();
}

}  // namespace

bool CudaIpcAutomatic(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kGatherV:
    case CollectiveKind::kScatterV:
    case CollectiveKind::kAllToAllV:
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kBarrier:
      return false;
    default:
      return true;
  }
}

absl::Status CudaIpcAllReduce(CollectiveContext& ctx, const CollectiveArgs& args) {
  return RunCall(ctx, args, [&](IpcCall& call) -> absl::Status {
    const int r = call.rank();
    const size_t elem = args.elem();
    const std::vector<size_t> counts = EvenCounts(args.count, call.size());
    const std::vector<size_t> offsets = PackedOffsets(counts);
    call.Reduce(r, offsets[r] * elem, counts[r], At(call.recv(r), offsets[r] * elem));
    CHORUS_RETURN_IF_ERROR(call.Round(kReduced));
    for (int peer = 0; peer < call.size(); ++peer) {
      if (peer == r) continue;
      const size_t at = offsets[peer] * elem;
      call.Copy(At(call.recv(r), at), At(call.recv(peer), at), counts[peer] * elem);
    }
    return absl::OkStatus();
  });
}

absl::Status CudaIpcReduce(CollectiveContext& ctx, const CollectiveArgs& args) {
  return RunCall(ctx, args, [&](IpcCall& call) {
    // Rank r reduces block r of every input into the root's output, starting from the root's
    // input: in place, that is the output.
    const int r = call.rank();
    const std::vector<size_t> counts = EvenCounts(args.count, call.size());
    const size_t at = PackedOffsets(counts)[r] * args.elem();
    call.Reduce(args.root, at, counts[r], At(call.recv(args.root), at));
    return absl::OkStatus();
  });
}

absl::Status CudaIpcReduceScatter(CollectiveContext& ctx, const CollectiveArgs& args) {
  return RunCall(ctx, args, [&](IpcCall& call) {
    // reduce_scatter: blocks of `count`; reduce_scatterv: of counts[r], packed.
    const std::vector<size_t> counts =
        args.counts.empty() ? std::vector<size_t>(call.size(), args.count) : args.counts;
    const int r = call.rank();
    call.Reduce(r, PackedOffsets(counts)[r] * args.elem(), counts[r], call.recv(r));
    return absl::OkStatus();
  });
}

absl::Status CudaIpcMove(CollectiveContext& ctx, const CollectiveArgs& args) {
  return RunCall(ctx, args, [&](IpcCall& call) {
    const int p = call.size();
    const int r = call.rank();
    const size_t elem = args.elem();
    const BufferElements mine = ElementsOf(args, r, p);
    const RankLayout recv_blocks = RecvBlocks(args, p);
    std::vector<Block> into(p);
    for (int peer = 0; peer < p; ++peer) {
      into[peer] = DestinationBlock(args, mine, recv_blocks, peer);
      if (into[peer].count * elem != call.block_bytes(peer)) {
        // Counts that only this rank can compare (gatherv, scatterv, alltoallv).
        call.Fail(MismatchError(
            absl::StrCat("rank ", peer, " holds ", call.block_bytes(peer), " bytes for rank ", r,
                         ", which expects ", into[peer].count * elem,
                         "; every rank must pass counts that match the "
                         "other ranks' (the same collective with the same "
                         "arguments)"),
            peer));
      }
    }
    for (int peer = 0; peer < p; ++peer) {
      call.Copy(At(call.recv(r), into[peer].at * elem), call.block_from(peer),
                into[peer].count * elem);
    }
    return absl::OkStatus();
  });
}

}  // namespace chorus
