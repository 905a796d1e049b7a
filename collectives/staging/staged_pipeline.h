// A large allreduce, broadcast or reduce on CUDA device buffers, run through pinned host memory in
// segments so that the copies overlap the transfers: while the algorithm runs on segment k, the
// copy engine brings segment k+1 in from the device and takes segment k-1 back out. Without it
// (StagedCall) the whole input is copied in, then the algorithm runs, then the whole result is
// copied out; here only the first segment's copy in and the last one's copy out are not hidden
// (when the transfers take at least as long as the copies).
//
// These collectives combine or copy element i of every rank's buffers into element i of the
// result, so a segment is the same elements of every buffer, and every rank cuts its buffers
// alike (the segment size is part of the collective's header, so ranks that cut differently fail
// with a mismatch rather than exchanging pieces of different sizes).
//
// Every copy is queued on the caller's stream, in an order the stream runs one after the other:
// the only wait is for the whole stream, between segments, after the algorithm has finished the
// segment and before the copies of the next ones are queued. So the result is on the stream
// before the call returns, as for StagedCall.
//
// Thread-compatible: one call's object, used by the thread that runs it.
#ifndef CHORUS_COLLECTIVES_STAGING_STAGED_PIPELINE_H_
#define CHORUS_COLLECTIVES_STAGING_STAGED_PIPELINE_H_

#include <cstddef>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "chorus/collectives/collective_args.h"
#include "chorus/collectives/staging/staged_call.h"
#include "chorus/core/deadline.h"
#include "chorus/cuda/gpu_runtime.h"
#include "chorus/cuda/pinned_pool.h"

namespace chorus {

// The elements of each segment of a staged call of `args` (device buffers) when it runs in
// segments of at most `segment_bytes`; 0 when it runs whole (another collective, at most one
// segment's bytes, or `segment_bytes` 0).
size_t PipelineSegmentElements(const CollectiveArgs& args, size_t segment_bytes);

class StagedPipeline {
 public:
  // How long a failed call waits for the copies it left queued.
  static constexpr absl::Duration kDrainTimeout = absl::Seconds(10);

  // Takes the pinned blocks for `args` (device buffers of an allreduce, broadcast or reduce);
  // copies nothing yet.
  static absl::StatusOr<StagedPipeline> Prepare(GpuRuntime& runtime, PinnedPool& pool,
                                                const CollectiveArgs& args, int rank, int ranks,
                                                size_t segment_elements);

  // The whole call's arguments on the pinned blocks (host memory).
  const CollectiveArgs& host_args() const { return host_args_; }

  // Runs `run_segment` on each segment of host_args() in order, with the copies around it. A
  // failed copy or wait is passed to `copy_failed` with what was being copied ("copying in",
  // "copying to and from", "copying the result back to"), whose status is returned; a failed
  // segment's status is returned as it is. Either way the copies left queued are waited for
  // (Drain) before the pinned blocks can go back to the pool. After a failure the device's
  // receive buffer holds the results of the segments before the failed one, and its input
  // where the call is in place and they were not reached.
  absl::Status Run(
      Deadline deadline, absl::FunctionRef<absl::Status(const CollectiveArgs& segment)> run_segment,
      absl::FunctionRef<absl::Status(const absl::Status& error, absl::string_view step)>
          copy_failed);

 private:
  StagedPipeline(GpuRuntime& runtime, const BufferPlacement& placement)
      : runtime_(&runtime), placement_(placement) {}

  // Queues the copy of segment `index`'s input to pinned memory (nothing when this rank sends
  // nothing), or of its result back to the device (nothing when it receives nothing).
  absl::Status QueueIn(size_t index);
  absl::Status QueueOut(size_t index);
  // Queues the copy of segment `index` of `region` from the device, or with `out` to it
  // (nothing for an empty region).
  absl::Status QueueCopy(size_t index, const StagedRegion& region, bool out);
  // Waits (kDrainTimeout at most) for the copies still queued after a failure; if they do not
  // finish, the pinned blocks are abandoned rather than returned to the pool.
  absl::Status Drain();
  // Segment `index` of host_args(), and its element count (the last one may be short).
  CollectiveArgs Segment(size_t index) const;
  size_t SegmentElements(size_t index) const;
  size_t SegmentCount() const;

  GpuRuntime* runtime_;
  BufferPlacement placement_;
  CollectiveArgs host_args_;
  size_t segment_elements_ = 0;
  StagedRegion send_;  // the input, unless the call is in place or sends nothing
  StagedRegion recv_;  // the result (and the input of an in-place call)
  bool in_place_ = false;
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_STAGING_STAGED_PIPELINE_H_
