#include "chorus/transport/shm/single_copy.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"

namespace chorus::shm {

absl::StatusOr<SingleCopyMode> ParseSingleCopyMode(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "auto") return SingleCopyMode::kAuto;
  if (lower == "cma") return SingleCopyMode::kCma;
  if (lower == "staging") return SingleCopyMode::kStaging;
  return InvalidArgumentError(
      absl::StrCat("CHORUS_SHM_SINGLE_COPY='", text, "' is not one of auto, cma, staging"));
}

absl::string_view SingleCopyModeName(SingleCopyMode mode) {
  switch (mode) {
    case SingleCopyMode::kAuto:
      return "auto";
    case SingleCopyMode::kCma:
      return "cma";
    case SingleCopyMode::kStaging:
      return "staging";
  }
  return "?";
}

absl::string_view LargePathName(LargePath path) {
  switch (path) {
    case LargePath::kMemcpy:
      return "memcpy (same process)";
    case LargePath::kCrossMemory:
      return "cross-memory attach (process_vm_readv)";
    case LargePath::kStaging:
      return "staging area";
  }
  return "?";
}

absl::Status CrossMemoryRead(pid_t pid, void* local, uint64_t remote_address, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    struct iovec local_iov = {static_cast<char*>(local) + done, bytes - done};
    struct iovec remote_iov = {reinterpret_cast<void*>(remote_address + done), bytes - done};
    const ssize_t n = process_vm_readv(pid, &local_iov, 1, &remote_iov, 1, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    const int error = n == 0 ? EFAULT : errno;
    if (error == EINTR) continue;
    const std::string what = absl::StrCat(
        "process_vm_readv of ", bytes - done, " bytes at 0x", absl::Hex(remote_address + done),
        " in pid ", pid, " failed: ", std::strerror(error), " (errno ", error, ")");
    if (error == ESRCH) return PeerUnavailableError(absl::StrCat(what, "; the process is gone"));
    return InternalError(what);
  }
  return absl::OkStatus();
}

absl::Status CrossMemoryReadToSink(pid_t pid, RecvSink& sink, uint64_t remote_address,
                                   size_t bytes) {
  // One bounce buffer per thread, small enough to stay in the core's cache between the kernel's
  // write and the sink's read: the pieces never travel through DRAM on this side. Cache-line
  // aligned, so a reduction's vector loads never straddle two lines.
  static_assert(kCrossMemoryPieceBytes % RecvSink::kAlignment == 0);
  thread_local std::unique_ptr<char, decltype(&std::free)> bounce(nullptr, &std::free);
  if (bounce == nullptr) {
    bounce.reset(
        static_cast<char*>(std::aligned_alloc(RecvSink::kAlignment, kCrossMemoryPieceBytes)));
    if (bounce == nullptr) {
      return InternalError(absl::StrCat("cannot allocate the ", kCrossMemoryPieceBytes,
                                        "-byte buffer for cross-memory reads"));
    }
  }
  for (size_t offset = 0; offset < bytes; offset += kCrossMemoryPieceBytes) {
    const size_t piece = std::min(kCrossMemoryPieceBytes, bytes - offset);
    CHORUS_RETURN_IF_ERROR(CrossMemoryRead(pid, bounce.get(), remote_address + offset, piece));
    sink.Consume(offset, bounce.get(), piece);
  }
  return absl::OkStatus();
}

namespace {

// The shortest of `rounds` runs of `copy`, in seconds.
template <typename Copy>
double FastestRun(int rounds, Copy copy) {
  double best = 1e9;
  for (int i = 0; i < rounds; ++i) {
    const auto start = std::chrono::steady_clock::now();
    copy();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return std::max(best, 1e-9);
}

CopyRates MeasureCopyRates() {
  constexpr size_t kBytes = 64 << 10;
  constexpr int kRounds = 16;
  std::vector<char> source(kBytes, 1);
  std::vector<char> target(kBytes, 0);
  CopyRates rates;
  const pid_t self = getpid();
  bool cma_failed = false;
  rates.cross_memory =
      kBytes / FastestRun(kRounds, [&] {
        cma_failed |=
            !CrossMemoryRead(self, target.data(), reinterpret_cast<uint64_t>(source.data()), kBytes)
                 .ok();
      });
  if (cma_failed) rates.cross_memory = 0;
  rates.memcpy = kBytes / FastestRun(kRounds, [&] {
                   std::memcpy(target.data(), source.data(), kBytes);
                   // Keeps the copy from being optimised away.
                   asm volatile("" : : "r"(target.data()) : "memory");
                 });
  return rates;
}

}  // namespace

const CopyRates& MeasuredCopyRates() {
  static const CopyRates rates = MeasureCopyRates();
  return rates;
}

absl::Status ProbeCrossMemory(pid_t pid, uint64_t address, uint64_t expected) {
  uint64_t value = 0;
  CHORUS_RETURN_IF_ERROR(CrossMemoryRead(pid, &value, address, sizeof(value)));
  if (value != expected) {
    return InternalError(
        absl::StrCat("process_vm_readv in pid ", pid, " read an unexpected probe value"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LargePath> ChooseLargePath(SingleCopyMode mode, int rank, int peer, pid_t pid,
                                          uint64_t probe_address, uint64_t probe_value) {
  if (mode == SingleCopyMode::kStaging) return LargePath::kStaging;
  if (mode == SingleCopyMode::kAuto && pid == getpid()) return LargePath::kMemcpy;
  const absl::Status probe = ProbeCrossMemory(pid, probe_address, probe_value);
  if (probe.ok()) {
    const CopyRates& rates = MeasuredCopyRates();
    if (mode == SingleCopyMode::kCma || rates.CrossMemoryWorthIt()) return LargePath::kCrossMemory;
    CHORUS_LOG(kInfo, "shm") << "rank " << rank << ": cross-memory attach copies at "
                             << rates.cross_memory / 1e9 << " GB/s against memcpy's "
                             << rates.memcpy / 1e9 << " GB/s here; large messages from rank "
                             << peer
                             << " go through the staging area (CHORUS_SHM_SINGLE_COPY=cma "
                                "forces cross-memory attach)";
    return LargePath::kStaging;
  }
  if (mode == SingleCopyMode::kCma) {
    return PeerUnavailableError(
        absl::StrCat("shm: CHORUS_SHM_SINGLE_COPY=cma, but cross-memory attach to rank ", peer,
                     " fails: ", probe.message(),
                     "; set it to auto to fall back to the staging area"),
        peer);
  }
  CHORUS_LOG(kInfo, "shm") << "rank " << rank << ": cross-memory attach to rank " << peer
                           << " is not allowed (" << probe.message()
                           << "); its large messages go through the staging area";
  return LargePath::kStaging;
}

}  // namespace chorus::shm
