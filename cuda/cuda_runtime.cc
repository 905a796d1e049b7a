#include "chorus/cuda/cuda_runtime.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "chorus/core/status.h"
#include "chorus/cuda/reduce_kernels.h"

namespace chorus {
namespace {

// "cudaMemcpyAsync failed: cudaErrorInvalidValue (invalid argument)". Errors that say the arguments
// were wrong are kInvalidArgument; the rest kInternal.
absl::Status CudaStatus(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return absl::OkStatus();
  const std::string message = absl::StrCat(call, " failed: ", cudaGetErrorName(error), " (",
                                           cudaGetErrorString(error), ")");
  switch (error) {
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
      return InvalidArgumentError(message);
    default:
      return InternalError(message);
  }
}

#define CHORUS_CUDA_RETURN_IF_ERROR(call) CHORUS_RETURN_IF_ERROR(CudaStatus(call, #call))

// Makes `device` current on this thread for the scope and restores the caller's afterwards.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ == device) return;
    status_ = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
    switched_ = status_.ok() && previous_ >= 0;
  }
  ~ScopedDevice() {
    if (switched_) cudaSetDevice(previous_);
  }
  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  bool switched_ = false;  // this scope changed the device, and knows the caller's
  absl::Status status_;
};

}  // namespace

CudaRuntime::CudaRuntime()
    : mappings_(kMaxOpenAllocations, [](void* base, int device) {
        ScopedDevice scoped(device);
        cudaIpcCloseMemHandle(base);
      }) {}

absl::Status CudaRuntime::Available() {
  std::call_once(probe_once_, [this] {
    const cudaError_t error = cudaGetDeviceCount(&devices_);
    if (error != cudaSuccess) {
      available_ = CudaStatus(error, "cudaGetDeviceCount");
      devices_ = 0;
    } else if (devices_ == 0) {
      available_ = InvalidArgumentError("cudaGetDeviceCount found no CUDA device");
    }
  });
  return available_;
}

int CudaRuntime::DeviceCount() {
  Available().IgnoreError();
  return devices_;
}

std::string CudaRuntime::Describe() {
  int runtime = 0;
  int driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  const absl::Status available = Available();
  return absl::StrCat(
      "CUDA runtime ", runtime / 1000, ".", runtime % 1000 / 10, ", driver ", driver / 1000, ".",
      driver % 1000 / 10, ", ",
      available.ok() ? absl::StrCat(devices_, " device(s)") : std::string(available.message()));
}

absl::StatusOr<PointerLocation> CudaRuntime::Locate(const void* pointer) {
  CHORUS_RETURN_IF_ERROR(Available());
  cudaPointerAttributes attributes{};
  CHORUS_CUDA_RETURN_IF_ERROR(cudaPointerGetAttributes(&attributes, pointer));
  PointerLocation location;
  if (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged) {
    location.on_device = true;
    location.device = attributes.device;
  }
  return location;
}

absl::StatusOr<int> CudaRuntime::StreamDevice(void* stream) {
  CHORUS_RETURN_IF_ERROR(Available());
  int device = -1;
  if (stream == nullptr) {
    CHORUS_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  } else {
    CHORUS_CUDA_RETURN_IF_ERROR(cudaStreamGetDevice(static_cast<cudaStream_t>(stream), &device));
  }
  return device;
}

absl::StatusOr<void*> CudaRuntime::AllocatePinned(size_t bytes) {
  CHORUS_RETURN_IF_ERROR(Available());
  void* pointer = nullptr;
  CHORUS_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&pointer, bytes, cudaHostAllocPortable));
  return pointer;
}

void CudaRuntime::FreePinned(void* pointer) {
  // Nothing to do on failure: the memory is the process's until it ends.
  cudaFreeHost(pointer);
}

namespace {

// The driver's cuMemGetAddressRange, found through the runtime: linking libcuda itself would make
// every binary need the driver to start, also on machines without a GPU.
using MemGetAddressRange = CUresult (*)(CUdeviceptr* base, size_t* size, CUdeviceptr pointer);

absl::StatusOr<MemGetAddressRange> AddressRangeFunction() {
  static void* function = nullptr;
  static cudaError_t error = [] {
    cudaDriverEntryPointQueryResult found;
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &function, 12000,
                                                           cudaEnableDefault, &found);
    return e == cudaSuccess && found != cudaDriverEntryPointSuccess ? cudaErrorSymbolNotFound : e;
  }();
  CHORUS_RETURN_IF_ERROR(
      CudaStatus(error, "cudaGetDriverEntryPointByVersion(cuMemGetAddressRange)"));
  return reinterpret_cast<MemGetAddressRange>(function);
}

}  // namespace

absl::StatusOr<IpcMemory> CudaRuntime::ExportMemory(int device, const void* pointer) {
  CHORUS_RETURN_IF_ERROR(Available());
  ScopedDevice scoped(device);
  CHORUS_RETURN_IF_ERROR(scoped.status());
  CHORUS_ASSIGN_OR_RETURN(const MemGetAddressRange address_range, AddressRangeFunction());
  CUdeviceptr base = 0;
  size_t size = 0;
  const CUresult result = address_range(&base, &size, reinterpret_cast<CUdeviceptr>(pointer));
  if (result != CUDA_SUCCESS) {
    return InvalidArgumentError(absl::StrCat("cuMemGetAddressRange failed (CUresult ", result,
                                             "): the pointer is not in a device allocation"));
  }
  cudaIpcMemHandle_t handle;
  CHORUS_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base)));
  IpcMemory memory;
  static_assert(sizeof(handle) == sizeof(memory.handle), "cudaIpcMemHandle_t is 64 bytes");
  std::memcpy(memory.handle.data(), &handle, sizeof(handle));
  memory.offset = reinterpret_cast<CUdeviceptr>(pointer) - base;
  return memory;
}

absl::StatusOr<void*> CudaRuntime::OpenMemory(int device, const IpcMemory& memory) {
  CHORUS_RETURN_IF_ERROR(Available());
  auto open = [&]() -> absl::StatusOr<void*> {
    ScopedDevice scoped(device);
    CHORUS_RETURN_IF_ERROR(scoped.status());
    cudaIpcMemHandle_t handle;
    std::memcpy(&handle, memory.handle.data(), sizeof(handle));
    void* base = nullptr;
    CHORUS_CUDA_RETURN_IF_ERROR(
        cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess));
    return base;
  };
  CHORUS_ASSIGN_OR_RETURN(void* base, mappings_.Acquire(memory.handle, device, open));
  return static_cast<char*>(base) + memory.offset;
}

void CudaRuntime::ReleaseMemory(const IpcMemory& memory) { mappings_.Release(memory.handle); }

absl::Status CudaRuntime::EnablePeerAccess(int device, int peer) {
  if (device == peer) return absl::OkStatus();
  CHORUS_RETURN_IF_ERROR(Available());
  int can_access = 0;
  CHORUS_CUDA_RETURN_IF_ERROR(cudaDeviceCanAccessPeer(&can_access, device, peer));
  if (can_access == 0) {
    return InvalidArgumentError(absl::StrCat("GPU ", device, " cannot reach GPU ", peer,
                                             "'s memory directly (cudaDeviceCanAccessPeer)"));
  }
  ScopedDevice scoped(device);
  CHORUS_RETURN_IF_ERROR(scoped.status());
  const cudaError_t error = cudaDeviceEnablePeerAccess(peer, 0);
  if (error == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();  // not an error here: clear it from the thread's state
    return absl::OkStatus();
  }
  return CudaStatus(error, "cudaDeviceEnablePeerAccess");
}

absl::StatusOr<void*> CudaRuntime::AllocateDevice(int device, size_t bytes) {
  CHORUS_RETURN_IF_ERROR(Available());
  ScopedDevice scoped(device);
  CHORUS_RETURN_IF_ERROR(scoped.status());
  void* pointer = nullptr;
  CHORUS_CUDA_RETURN_IF_ERROR(cudaMalloc(&pointer, bytes));
  return pointer;
}

void CudaRuntime::FreeDevice(int device, void* pointer) {
  ScopedDevice scoped(device);
  cudaFree(pointer);
}

absl::Status CudaRuntime::CopyAsync(void* dst, const void* src, size_t bytes, int device,
                                    void* stream) {
  if (bytes == 0) return absl::OkStatus();
  ScopedDevice scoped(device);
  CHORUS_RETURN_IF_ERROR(scoped.status());
  return CudaStatus(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)),
      "cudaMemcpyAsync");
}

absl::Status CudaRuntime::ReduceAsync(DataType type, ReduceOp op,
                                      absl::Span<const void* const> inputs, void* dst, size_t count,
                                      int device, void* stream) {
  if (inputs.empty()) return InvalidArgumentError("ReduceAsync without inputs");
  ScopedDevice scoped(device);
  CHORUS_RETURN_IF_ERROR(scoped.status());
  const int divisor = op == ReduceOp::kAvg ? static_cast<int>(inputs.size()) : 0;
  return CudaStatus(
      static_cast<cudaError_t>(cuda_kernels::LaunchReduce(
          type, op, inputs.data(), static_cast<int>(inputs.size()), dst, count, divisor, stream)),
      "the reduction kernel's launch");
}

absl::Status CudaRuntime::WaitStream(int device, void* stream, Deadline deadline) {
  ScopedDevice scoped(device);
  CHORUS_RETURN_IF_ERROR(scoped.status());
  cudaEvent_t event;
  CHORUS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  absl::Status status =
      CudaStatus(cudaEventRecord(event, static_cast<cudaStream_t>(stream)), "cudaEventRecord");
  // Staging copies of small messages finish in microseconds, and a sleep costs tens of them on
  // a busy host: poll (yielding the core) for up to a millisecond, then sleep between polls so
  // that a long wait (a kernel queued before the collective) leaves the core to others.
  const absl::Time poll_until = absl::Now() + absl::Milliseconds(1);
  while (status.ok()) {
    const cudaError_t query = cudaEventQuery(event);
    if (query == cudaSuccess) break;
    if (query != cudaErrorNotReady) {
      status = CudaStatus(query, "waiting for the stream (cudaEventQuery)");
    } else if (deadline.Expired()) {
      status = DeadlineExceededError(
          "the CUDA stream's work did not finish before the deadline (a kernel queued before "
          "the collective may still be running)");
    } else if (absl::Now() < poll_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  cudaEventDestroy(event);
  return status;
}

}  // namespace chorus
