// GpuRuntime over the CUDA runtime API (cudart, linked statically). Every CUDA error becomes a
// Status naming the call and cudaGetErrorString's text. Calls that need a device switch the calling
// thread to it and back, so the caller's current device never changes.
//
// Thread-safe.
#ifndef CHORUS_CUDA_CUDA_RUNTIME_H_
#define CHORUS_CUDA_CUDA_RUNTIME_H_

#include <cstddef>
#include <mutex>
#include <string>

#include "chorus/cuda/gpu_runtime.h"
#include "chorus/cuda/ipc_mappings.h"

namespace chorus {

class CudaRuntime : public GpuRuntime {
 public:
  CudaRuntime();
  std::string Describe() override;
  absl::Status Available() override;
  int DeviceCount() override;
  absl::StatusOr<PointerLocation> Locate(const void* pointer) override;
  absl::StatusOr<int> StreamDevice(void* stream) override;
  absl::StatusOr<void*> AllocatePinned(size_t bytes) override;
  void FreePinned(void* pointer) override;
  absl::StatusOr<void*> AllocateDevice(int device, size_t bytes) override;
  void FreeDevice(int device, void* pointer) override;
  absl::StatusOr<IpcMemory> ExportMemory(int device, const void* pointer) override;
  absl::StatusOr<void*> OpenMemory(int device, const IpcMemory& memory) override;
  void ReleaseMemory(const IpcMemory& memory) override;
  absl::Status EnablePeerAccess(int device, int peer) override;
  absl::Status CopyAsync(void* dst, const void* src, size_t bytes, int device,
                         void* stream) override;
  absl::Status ReduceAsync(DataType type, ReduceOp op, absl::Span<const void* const> inputs,
                           void* dst, size_t count, int device, void* stream) override;
  absl::Status WaitStream(int device, void* stream, Deadline deadline) override;

 private:
  // Peer allocations kept open while unused; the least recently used is closed first.
  static constexpr size_t kMaxOpenAllocations = 256;

  std::once_flag probe_once_;
  absl::Status available_;
  int devices_ = 0;

  IpcMappings mappings_;
};

}  // namespace chorus

#endif  // CHORUS_CUDA_CUDA_RUNTIME_H_
