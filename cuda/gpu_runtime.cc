#include "chorus/cuda/gpu_runtime.h"

#include <atomic>

namespace chorus {
namespace {

std::atomic<GpuRuntime*> installed{nullptr};

}  // namespace

GpuRuntime* InstalledGpuRuntime() { return installed.load(std::memory_order_acquire); }

void InstallGpuRuntime(GpuRuntime* runtime) { installed.store(runtime, std::memory_order_release); }

}  // namespace chorus
