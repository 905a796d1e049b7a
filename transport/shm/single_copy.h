// The single-copy path for large messages: the receiver reads straight from the sender's buffer
// with cross-memory attach (process_vm_readv), or with memcpy when the sender is a thread of the
// same process. Where the kernel refuses cross-memory attach (Yama ptrace_scope >= 1 between
// non-descendants, different users, seccomp), or where it copies at under half memcpy's rate
// (CopyRates), messages go through the staging area instead.
#ifndef CHORUS_TRANSPORT_SHM_SINGLE_COPY_H_
#define CHORUS_TRANSPORT_SHM_SINGLE_COPY_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chorus/transport/transport.h"

namespace chorus::shm {

// CHORUS_SHM_SINGLE_COPY: how large messages move.
enum class SingleCopyMode {
  kAuto,     // memcpy within a process; cross-memory attach if the probe succeeds and it is not
             // much slower than memcpy here (CopyRates); else staging
  kCma,      // always process_vm_readv (also within a process); a peer it fails on is unusable
  kStaging,  // always the staging area (two copies, pipelined)
};

absl::StatusOr<SingleCopyMode> ParseSingleCopyMode(absl::string_view text);
absl::string_view SingleCopyModeName(SingleCopyMode mode);

// How this rank reads one peer's large messages, decided once per peer at connect time.
enum class LargePath { kMemcpy, kCrossMemory, kStaging };
absl::string_view LargePathName(LargePath path);

// The path by which this rank (`rank`) reads the large messages of rank `peer`, process `pid`,
// in `mode`: memcpy within a process (kAuto), else cross-memory attach where a probe of the
// peer's `probe_address` (which holds `probe_value`) succeeds and it is worth it here
// (CopyRates), else the staging area. kPeerUnavailable where `mode` is kCma and the probe fails.
absl::StatusOr<LargePath> ChooseLargePath(SingleCopyMode mode, int rank, int peer, pid_t pid,
                                          uint64_t probe_address, uint64_t probe_value);

// Copies `bytes` from `remote_address` in process `pid` into `local`. Loops over partial reads.
// kPeerUnavailable when the process is gone, kInternal for any other failure.
absl::Status CrossMemoryRead(pid_t pid, void* local, uint64_t remote_address, size_t bytes);

// Like CrossMemoryRead, but hands the bytes to `sink` in pieces of kCrossMemoryPieceBytes read
// into a per-thread buffer that stays in cache, so a reducing sink reads them from there. On an
// error the sink may already have consumed the leading pieces.
inline constexpr size_t kCrossMemoryPieceBytes = 256 << 10;
absl::Status CrossMemoryReadToSink(pid_t pid, RecvSink& sink, uint64_t remote_address,
                                   size_t bytes);

// How fast cross-memory attach copies compared with memcpy in this process, measured once (about
// a millisecond) on first use: the better of several 64 KiB copies each way, in bytes per second.
struct CopyRates {
  double cross_memory = 0;
  double memcpy = 0;
  // The staging area costs two copies, made by the sender and the receiver at once; cross-memory
  // attach one copy by the receiver. Below half memcpy's rate (a host whose page pinning is
  // slow, as on some virtual machines) the single copy costs more CPU time than both staging
  // copies together, and a collective over it ends slower (docs/benchmarks.md).
  bool CrossMemoryWorthIt() const { return cross_memory >= 0.5 * memcpy; }
};
const CopyRates& MeasuredCopyRates();

// Whether process_vm_readv works against `pid`: reads 8 bytes at `address` and compares them with
// `expected`. The error says why not (EPERM: ptrace scope or another user; ENOSYS: seccomp).
absl::Status ProbeCrossMemory(pid_t pid, uint64_t address, uint64_t expected);

}  // namespace chorus::shm

#endif  // CHORUS_TRANSPORT_SHM_SINGLE_COPY_H_
