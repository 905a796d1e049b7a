// A collective on CUDA device buffers, run through pinned host memory: StageIn queues copies of
// what the call reads into pinned blocks on the caller's stream (so they start after the work
// already queued there) and waits for them; the algorithms then run on host_args() over any
// transport; StageOut queues the copy of the result back on the same stream, so work queued there
// afterwards sees it, and waits for it before the pinned blocks are reused.
//
// Buffers keep their in-place relation (one pinned block serves both) and bytes of a receive buffer
// that the call does not write (between gatherv's or alltoallv's placed blocks) come back
// unchanged.
//
// Thread-compatible: one call's object, used by the thread that runs it.
#ifndef CHORUS_COLLECTIVES_STAGING_STAGED_CALL_H_
#define CHORUS_COLLECTIVES_STAGING_STAGED_CALL_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "chorus/collectives/collective_args.h"
#include "chorus/collectives/staging/placement.h"
#include "chorus/core/deadline.h"
#include "chorus/cuda/gpu_runtime.h"
#include "chorus/cuda/pinned_pool.h"

namespace chorus {

// One device buffer and its pinned copy.
struct StagedRegion {
  char* device = nullptr;
  PinnedPool::Block host;
  size_t bytes = 0;

  char* host_data() const { return static_cast<char*>(host.data()); }
};

// A pinned copy of `bytes` at `device_data`; with `copy_in`, its filling from the device is queued
// on the placement's stream (wait for the stream before reading it).
absl::StatusOr<StagedRegion> StageRegion(GpuRuntime& runtime, PinnedPool& pool,
                                         const BufferPlacement& placement, void* device_data,
                                         size_t bytes, bool copy_in);

// Copies `bytes` of `region` from `offset` back to the device on the placement's stream and waits
// for it.
absl::Status UnstageRegion(GpuRuntime& runtime, const BufferPlacement& placement,
                           const StagedRegion& region, size_t offset, size_t bytes,
                           Deadline deadline);

class StagedCall {
 public:
  // `args` are of device buffers (args.cuda_device, args.cuda_stream).
  static absl::StatusOr<StagedCall> StageIn(GpuRuntime& runtime, PinnedPool& pool,
                                            const CollectiveArgs& args, int rank, int ranks,
                                            Deadline deadline);

  // The call's arguments with its buffers replaced by their pinned copies (host memory).
  const CollectiveArgs& host_args() const { return host_args_; }

  absl::Status StageOut(Deadline deadline);

 private:
  StagedCall(GpuRuntime& runtime, const BufferPlacement& placement)
      : runtime_(&runtime), placement_(placement) {}

  GpuRuntime* runtime_;
  BufferPlacement placement_;
  CollectiveArgs host_args_;
  StagedRegion send_;       // empty when in place or the call sends nothing
  StagedRegion recv_;       // the whole in-place allocation when in place
  size_t recv_offset_ = 0;  // where the receive buffer starts in recv_
  size_t recv_bytes_ = 0;
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_STAGING_STAGED_CALL_H_
