#include "chorus/collectives/staging/staged_call.h"

#include <algorithm>
#include <utility>

#include "chorus/collectives/shape.h"
#include "chorus/core/status.h"

namespace chorus {
namespace {

// Receive buffers whose blocks sit at displacements: the bytes between them are not the call's to
// write, so they go to the pinned copy first and come back as they were.
bool HasGaps(Extent extent) {
  return extent == Extent::kPlacedCounts || extent == Extent::kPlacedSendCounts;
}

}  // namespace

absl::StatusOr<StagedRegion> StageRegion(GpuRuntime& runtime, PinnedPool& pool,
                                         const BufferPlacement& placement, void* device_data,
                                         size_t bytes, bool copy_in) {
  StagedRegion region;
  region.device = static_cast<char*>(device_data);
  region.bytes = bytes;
  CHORUS_ASSIGN_OR_RETURN(region.host, pool.Take(bytes));
  if (copy_in) {
    CHORUS_RETURN_IF_ERROR(runtime.CopyAsync(region.host_data(), region.device, bytes,
                                             placement.device, placement.stream));
  }
  return region;
}

absl::Status UnstageRegion(GpuRuntime& runtime, const BufferPlacement& placement,
                           const StagedRegion& region, size_t offset, size_t bytes,
                           Deadline deadline) {
  if (bytes == 0) return absl::OkStatus();
  CHORUS_RETURN_IF_ERROR(runtime.CopyAsync(region.device + offset, region.host_data() + offset,
                                           bytes, placement.device, placement.stream));
  return runtime.WaitStream(placement.device, placement.stream, deadline);
}

absl::StatusOr<StagedCall> StagedCall::StageIn(GpuRuntime& runtime, PinnedPool& pool,
                                               const CollectiveArgs& args, int rank, int ranks,
                                               Deadline deadline) {
  const BufferPlacement placement{true, args.cuda_device, args.cuda_stream};
  StagedCall call(runtime, placement);
  call.host_args_ = args;
  call.host_args_.cuda_device = -1;
  call.host_args_.cuda_stream = nullptr;
  const size_t elem = args.elem();
  const BufferElements elements = ElementsOf(args, rank, ranks);
  const size_t send_bytes = elements.send * elem;
  call.recv_bytes_ = elements.recv * elem;
  const bool gaps = HasGaps(ShapeOf(args.kind).recv);
  if (send_bytes > 0 && call.recv_bytes_ > 0 && IsInPlace(args, rank)) {
    // One allocation holds both buffers, as on the device.
    const InPlaceOffsets offsets = *InPlaceOffsetsOf(args, rank);
    const size_t send_at = offsets.send * elem;
    call.recv_offset_ = offsets.recv * elem;
    const size_t total = std::max(send_at + send_bytes, call.recv_offset_ + call.recv_bytes_);
    char* base = static_cast<char*>(args.recv) - call.recv_offset_;
    CHORUS_ASSIGN_OR_RETURN(call.recv_,
                            StageRegion(runtime, pool, placement, base, total, /*copy_in=*/false));
    const size_t in_at = gaps ? 0 : send_at;
    const size_t in_bytes = gaps ? total : send_bytes;
    CHORUS_RETURN_IF_ERROR(runtime.CopyAsync(call.recv_.host_data() + in_at, base + in_at, in_bytes,
                                             placement.device, placement.stream));
    call.host_args_.send = call.recv_.host_data() + send_at;
    call.host_args_.recv = call.recv_.host_data() + call.recv_offset_;
  } else {
    if (send_bytes > 0) {
      CHORUS_ASSIGN_OR_RETURN(call.send_,
                              StageRegion(runtime, pool, placement, const_cast<void*>(args.send),
                                          send_bytes, /*copy_in=*/true));
      call.host_args_.send = call.send_.host_data();
    }
    if (call.recv_bytes_ > 0) {
      CHORUS_ASSIGN_OR_RETURN(call.recv_, StageRegion(runtime, pool, placement, args.recv,
                                                      call.recv_bytes_, /*copy_in=*/gaps));
      call.host_args_.recv = call.recv_.host_data();
    }
  }
  CHORUS_RETURN_IF_ERROR(runtime.WaitStream(placement.device, placement.stream, deadline));
  return call;
}

absl::Status StagedCall::StageOut(Deadline deadline) {
  return UnstageRegion(*runtime_, placement_, recv_, recv_offset_, recv_bytes_, deadline);
}

}  // namespace chorus
