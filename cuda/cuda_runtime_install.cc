// Linking //cuda:cuda_runtime installs the CUDA runtime for the process at load time. It touches no
// GPU until a collective asks (CudaRuntime::Available probes on first use).
#include "chorus/cuda/cuda_runtime.h"

namespace chorus {
namespace {

// Never destroyed: pinned blocks may still be returned to it while the process exits.
const bool installed = [] {
  InstallGpuRuntime(new CudaRuntime());
  return true;
}();

}  // namespace
}  // namespace chorus
