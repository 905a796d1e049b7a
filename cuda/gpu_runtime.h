// The small part of a GPU runtime that Chorus needs, as an interface: locating pointers, pinned
// host memory, stream-ordered copies and reductions, and waiting for a stream with a deadline.
// The CUDA implementation (cuda_runtime.h) is built only by --config=cuda builds; the collective
// layer speaks this interface, so the host-only library builds without CUDA and tests can run
// the staging logic over a host-memory stand-in (tests/cuda/host_gpu_runtime.h).
//
// Streams are opaque (a cudaStream_t for CUDA); null is the device's legacy default stream.
// Thread-safety: implementations are thread-safe.
#ifndef CHORUS_CUDA_GPU_RUNTIME_H_
#define CHORUS_CUDA_GPU_RUNTIME_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "chorus/core/deadline.h"
#include "chorus/core/types.h"

namespace chorus {

// Where a pointer points.
struct PointerLocation {
  bool on_device = false;  // memory of a GPU (device or managed memory), not host memory
  int device = -1;         // that GPU's ordinal when on_device
};

// Device memory as another process on the host can open it (cudaIpcMemHandle_t for CUDA): the
// handle of the allocation that holds a pointer, and the pointer's offset in it.
struct IpcMemory {
  std::array<uint8_t, 64> handle{};
  uint64_t offset = 0;
};

class GpuRuntime {
 public:
  virtual ~GpuRuntime() = default;

  // One line for logs: runtime, version, device count.
  virtual std::string Describe() = 0;

  // OK when a GPU can be used; otherwise why not ("no CUDA driver", "no device"), checked once.
  virtual absl::Status Available() = 0;

  // How many GPUs this process sees (0 when none is usable).
  virtual int DeviceCount() = 0;

  // Where `pointer` lives. Host memory the runtime does not know (plain malloc) is host.
  virtual absl::StatusOr<PointerLocation> Locate(const void* pointer) = 0;

  // The device `stream` belongs to; for null, the calling thread's current device.
  virtual absl::StatusOr<int> StreamDevice(void* stream) = 0;

  // Page-locked host memory, which copies to and from a device reach at full speed.
  virtual absl::StatusOr<void*> AllocatePinned(size_t bytes) = 0;
  virtual void FreePinned(void* pointer) = 0;

  // Memory of `device`, for tools and tests that need device buffers (Chorus itself never allocates
  // device memory).
  virtual absl::StatusOr<void*> AllocateDevice(int device, size_t bytes) = 0;
  virtual void FreeDevice(int device, void* pointer) = 0;

  // The IPC handle of the device memory at `pointer` (memory of `device`).
  virtual absl::StatusOr<IpcMemory> ExportMemory(int device, const void* pointer) = 0;

  // The address in this process of memory that another process exported, usable until the
  // matching ReleaseMemory. Opened allocations are cached, so a buffer used call after call is
  // opened once; one is closed only when no OpenMemory of it is unreleased and the cache needs
  // room, or when the runtime ends. Memory this process exported itself cannot be opened (CUDA
  // refuses it): use its own address.
  virtual absl::StatusOr<void*> OpenMemory(int device, const IpcMemory& memory) = 0;
  // One OpenMemory of `memory` is over: every piece of work queued on it has finished. Work
  // that may still run (a stream that missed its deadline) must not be followed by this call.
  virtual void ReleaseMemory(const IpcMemory& memory) = 0;

  // Lets work queued on `device` read and write memory of `peer` directly (peer to peer), for
  // ranks of one process on different GPUs. OK at once for the same device, or when access is
  // already enabled; an error when the two GPUs cannot reach each other.
  virtual absl::Status EnablePeerAccess(int device, int peer) = 0;

  // Queues a copy of `bytes` between any two memories on `stream` of `device`: it starts after the
  // work queued there before it.
  virtual absl::Status CopyAsync(void* dst, const void* src, size_t bytes, int device,
                                 void* stream) = 0;

  // Queues dst[i] = inputs[0][i] op inputs[1][i] op ... on `stream`, combined in that order
  // and rounded to the type at every step, as the host kernels combine them pairwise, so the
  // result has the same bits. kAvg sums, then divides by the number of inputs. `dst` may be
  // inputs[0] (no other input); all point into memory of `device`; at least one input.
  virtual absl::Status ReduceAsync(DataType type, ReduceOp op, absl::Span<const void* const> inputs,
                                   void* dst, size_t count, int device, void* stream) = 0;

  // Returns once the work queued on `stream` so far has finished: OK, the error the work raised, or
  // DeadlineExceeded at `deadline` (the work goes on).
  virtual absl::Status WaitStream(int device, void* stream, Deadline deadline) = 0;
};

// The process's GPU runtime: the one installed by linking //cuda:cuda_runtime (a --config=cuda
// build), or by a test; null in a host-only build.
GpuRuntime* InstalledGpuRuntime();

// Makes `runtime` the process's (null uninstalls). It must outlive every use; install before the
// first collective, not while one runs.
void InstallGpuRuntime(GpuRuntime* runtime);

}  // namespace chorus

#endif  // CHORUS_CUDA_GPU_RUNTIME_H_
