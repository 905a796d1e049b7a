// A GpuRuntime over host memory: the stand-in that lets the staging logic, the pinned pool and the
// device-buffer paths of the collectives run in tests on machines without a GPU. "Device" memory is
// host memory this runtime allocated, tagged with a device ordinal; pinned memory is plain host
// memory; a stream is a queue whose work runs only when someone waits for it, so a caller that
// reads a copy's destination before WaitStream sees the old bytes, as it might on a GPU. Reductions
// run the host kernels.
//
// Thread-safe.
#ifndef CHORUS_TESTS_CUDA_HOST_GPU_RUNTIME_H_
#define CHORUS_TESTS_CUDA_HOST_GPU_RUNTIME_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "chorus/cuda/gpu_runtime.h"

namespace chorus::testing {

class HostGpuRuntime : public GpuRuntime {
 public:
  explicit HostGpuRuntime(int devices = 2) : devices_(devices) {}
  ~HostGpuRuntime() override;

  // A stream of `device`, valid for the runtime's life.
  void* MakeStream(int device);

  // The next `count` copies, after `after` more that succeed, fail with an Internal error, as a
  // failed cudaMemcpyAsync would.
  void FailCopies(int count, int after = 0) {
    copies_before_failing_.store(after);
    failing_copies_.store(count);
  }
  // Copies queued so far (failed ones not counted).
  int copies_queued() const { return copies_queued_.load(); }
  // EnablePeerAccess between different devices fails while `refuse`, as between GPUs without
  // a peer-to-peer path.
  void RefusePeerAccess(bool refuse) { refusing_peer_access_.store(refuse); }
  // Whether EnablePeerAccess(device, peer) succeeded.
  bool peer_access(int device, int peer) const;

  int pinned_allocations() const { return pinned_allocations_.load(); }
  // Work queued on `stream` of `device` that no wait has run yet.
  size_t pending_work(int device, void* stream) const;
  int pinned_blocks_live() const;

  std::string Describe() override { return "host stand-in"; }
  absl::Status Available() override;
  int DeviceCount() override { return devices_; }
  absl::StatusOr<PointerLocation> Locate(const void* pointer) override;
  absl::StatusOr<int> StreamDevice(void* stream) override;
  absl::StatusOr<void*> AllocatePinned(size_t bytes) override;
  void FreePinned(void* pointer) override;
  absl::StatusOr<void*> AllocateDevice(int device, size_t bytes) override;
  void FreeDevice(int device, void* pointer) override;
  // The "handle" is the address and the process: only threads of one process share memory.
  absl::StatusOr<IpcMemory> ExportMemory(int device, const void* pointer) override;
  absl::StatusOr<void*> OpenMemory(int device, const IpcMemory& memory) override;
  // Opening maps nothing here, so there is nothing to release.
  void ReleaseMemory(const IpcMemory& memory) override {}
  absl::Status EnablePeerAccess(int device, int peer) override;
  absl::Status CopyAsync(void* dst, const void* src, size_t bytes, int device,
                         void* stream) override;
  absl::Status ReduceAsync(DataType type, ReduceOp op, absl::Span<const void* const> inputs,
                           void* dst, size_t count, int device, void* stream) override;
  absl::Status WaitStream(int device, void* stream, Deadline deadline) override;

 private:
  struct Allocation {
    size_t bytes = 0;
    int device = -1;  // -1: pinned host memory
  };
  // The queue of (device, stream); null streams have one per device.
  void Enqueue(int device, void* stream, std::function<void()> work);

  const int devices_;
  std::atomic<int> failing_copies_{0};
  std::atomic<int> copies_before_failing_{0};
  std::atomic<int> copies_queued_{0};
  std::atomic<bool> refusing_peer_access_{false};
  std::atomic<int> pinned_allocations_{0};
  mutable std::mutex mu_;
  std::map<const char*, Allocation> allocations_;  // by start address
  std::map<void*, int> streams_;                   // made streams and their devices
  std::set<std::pair<int, int>> peer_access_;      // (device, peer) pairs enabled
  std::vector<std::unique_ptr<int>> stream_handles_;
  struct Queue {
    std::vector<std::function<void()>> work;  // guarded by mu_
    // Held while a waiter runs work taken from `work`, so that a second waiter returns only
    // after work queued before its call has finished, whoever runs it.
    std::mutex running;
  };
  std::map<std::pair<int, void*>, Queue> queues_;
};

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_CUDA_HOST_GPU_RUNTIME_H_
