// Where one call's buffers live: host memory, or one CUDA device (then with the stream that
// orders them). Answers CollectiveOptions::memory, asking the installed GPU runtime when the
// caller did not say, and turns every inconsistency into an InvalidArgument that names what was
// found: device memory in a build without CUDA support, host and device buffers mixed in one
// call, buffers on two devices, a stream of another device.
#ifndef CHORUS_COLLECTIVES_STAGING_PLACEMENT_H_
#define CHORUS_COLLECTIVES_STAGING_PLACEMENT_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chorus/collectives/options.h"
#include "chorus/cuda/gpu_runtime.h"

namespace chorus {

struct BufferPlacement {
  bool on_device = false;
  int device = -1;
  void* stream = nullptr;
};

// One buffer of a call: `bytes` at `data`, called `what` in errors. Empty or null buffers say
// nothing about the placement.
struct CallBuffer {
  const void* data = nullptr;
  size_t bytes = 0;
  absl::string_view what;
};

// Whether PlaceBuffers must look at the buffers: not when the options say host memory, nor
// when they leave it to Chorus and there is no CUDA runtime (then every buffer is host memory).
inline bool PlacementAsked(const CollectiveOptions& options, const GpuRuntime* runtime) {
  return options.memory != MemoryPlacement::kHost &&
         (runtime != nullptr || options.memory != MemoryPlacement::kAuto);
}

// `runtime` may be null (a build without CUDA support). `call` names the call in errors.
absl::StatusOr<BufferPlacement> PlaceBuffers(absl::string_view call,
                                             std::initializer_list<CallBuffer> buffers,
                                             const CollectiveOptions& options, GpuRuntime* runtime);

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_STAGING_PLACEMENT_H_
