#include "chorus/collectives/staging/placement.h"

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"

namespace chorus {

absl::StatusOr<BufferPlacement> PlaceBuffers(absl::string_view call,
                                             std::initializer_list<CallBuffer> buffers,
                                             const CollectiveOptions& options,
                                             GpuRuntime* runtime) {
  BufferPlacement placement;
  // The common case costs nothing: no runtime, nothing asked (and no error built).
  if (!PlacementAsked(options, runtime)) return placement;
  const absl::Status available = runtime == nullptr
                                     ? InvalidArgumentError(
                                           "this build of Chorus has no CUDA support "
                                           "(build with --config=cuda, docs/cuda.md)")
                                     : runtime->Available();
  if (!available.ok()) {
    if (options.memory == MemoryPlacement::kAuto) return placement;
    return InvalidArgumentError(absl::StrCat(call, ": the call says its buffers are CUDA device ",
                                             "memory, but ", available.message()));
  }
  const CallBuffer* first_located = nullptr;
  PointerLocation first;
  for (const CallBuffer& buffer : buffers) {
    if (buffer.data == nullptr || buffer.bytes == 0) continue;
    CHORUS_ASSIGN_OR_RETURN(const PointerLocation location, runtime->Locate(buffer.data));
    if (options.memory == MemoryPlacement::kCuda && !location.on_device) {
      return InvalidArgumentError(absl::StrCat(call, ": the call says its buffers are CUDA ",
                                               "device memory, but ", buffer.what,
                                               " is host memory"));
    }
    if (first_located == nullptr) {
      first_located = &buffer;
      first = location;
      continue;
    }
    if (location.on_device != first.on_device) {
      const CallBuffer& on_device = location.on_device ? buffer : *first_located;
      const CallBuffer& on_host = location.on_device ? *first_located : buffer;
      return InvalidArgumentError(absl::StrCat(call, ": ", on_device.what,
                                               " is CUDA device memory but ", on_host.what,
                                               " is host memory; pass both in one place"));
    }
    if (location.on_device && location.device != first.device) {
      return InvalidArgumentError(absl::StrCat(call, ": ", first_located->what,
                                               " is on CUDA device ", first.device, " but ",
                                               buffer.what, " on device ", location.device));
    }
  }
  if (first_located == nullptr || !first.on_device) return placement;
  placement.on_device = true;
  placement.device = first.device;
  placement.stream = options.cuda_stream;
  if (options.cuda_stream == nullptr) return placement;  // the device's own default stream
  CHORUS_ASSIGN_OR_RETURN(const int stream_device, runtime->StreamDevice(options.cuda_stream));
  if (stream_device != first.device) {
    return InvalidArgumentError(absl::StrCat(call, ": the buffers are on CUDA device ",
                                             first.device, " but the stream belongs to device ",
                                             stream_device));
  }
  return placement;
}

}  // namespace chorus
