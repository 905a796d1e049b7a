#include "chorus/collectives/staging/staged_pipeline.h"

#include <algorithm>

#include "chorus/collectives/shape.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"

namespace chorus {

size_t PipelineSegmentElements(const CollectiveArgs& args, size_t segment_bytes) {
  if (!IsElementwise(args.kind) || segment_bytes == 0) return 0;
  const size_t elements = std::max<size_t>(1, segment_bytes / args.elem());
  return args.count > elements ? elements : 0;
}

absl::StatusOr<StagedPipeline> StagedPipeline::Prepare(GpuRuntime& runtime, PinnedPool& pool,
                                                       const CollectiveArgs& args, int rank,
                                                       int ranks, size_t segment_elements) {
  if (segment_elements == 0) {
    return InvalidArgumentError("a staged pipeline needs segments of at least one element");
  }
  const BufferPlacement placement{true, args.cuda_device, args.cuda_stream};
  StagedPipeline pipeline(runtime, placement);
  pipeline.segment_elements_ = segment_elements;
  pipeline.host_args_ = args;
  pipeline.host_args_.cuda_device = -1;
  pipeline.host_args_.cuda_stream = nullptr;
  const size_t elem = args.elem();
  const BufferElements elements = ElementsOf(args, rank, ranks);
  // The result's block serves as the input too when the call is in place, as on the device.
  pipeline.in_place_ = elements.send > 0 && elements.recv > 0 && IsInPlace(args, rank);
  if (elements.recv > 0) {
    CHORUS_ASSIGN_OR_RETURN(pipeline.recv_, StageRegion(runtime, pool, placement, args.recv,
                                                        elements.recv * elem, /*copy_in=*/false));
    pipeline.host_args_.recv = pipeline.recv_.host_data();
  }
  if (pipeline.in_place_) {
    pipeline.host_args_.send = pipeline.recv_.host_data();
  } else if (elements.send > 0) {
    CHORUS_ASSIGN_OR_RETURN(pipeline.send_,
                            StageRegion(runtime, pool, placement, const_cast<void*>(args.send),
                                        elements.send * elem, /*copy_in=*/false));
    pipeline.host_args_.send = pipeline.send_.host_data();
  }
  return pipeline;
}

size_t StagedPipeline::SegmentCount() const {
  return (host_args_.count + segment_elements_ - 1) / segment_elements_;
}

size_t StagedPipeline::SegmentElements(size_t index) const {
  return std::min(segment_elements_, host_args_.count - index * segment_elements_);
}

CollectiveArgs StagedPipeline::Segment(size_t index) const {
  CollectiveArgs segment = host_args_;
  segment.count = SegmentElements(index);
  const size_t offset = index * segment_elements_ * host_args_.elem();
  // A buffer this rank does not use stays as the caller passed it (it is never read).
  if (recv_.bytes > 0) segment.recv = recv_.host_data() + offset;
  if (in_place_) {
    segment.send = segment.recv;
  } else if (send_.bytes > 0) {
    segment.send = send_.host_data() + offset;
  }
  return segment;
}

absl::Status StagedPipeline::QueueCopy(size_t index, const StagedRegion& region, bool out) {
  if (region.bytes == 0) return absl::OkStatus();
  const size_t offset = index * segment_elements_ * host_args_.elem();
  const size_t bytes = SegmentElements(index) * host_args_.elem();
  char* const host = region.host_data() + offset;
  char* const device = region.device + offset;
  return runtime_->CopyAsync(out ? device : host, out ? host : device, bytes, placement_.device,
                             placement_.stream);
}

absl::Status StagedPipeline::QueueIn(size_t index) {
  return QueueCopy(index, in_place_ ? recv_ : send_, /*out=*/false);
}

absl::Status StagedPipeline::QueueOut(size_t index) {
  return QueueCopy(index, recv_, /*out=*/true);
}

absl::Status StagedPipeline::Drain() {
  // The call's own deadline may have passed: the copies still queued get a bounded wait of
  // their own, since the pinned blocks go back to the pool afterwards.
  const absl::Status drained =
      runtime_->WaitStream(placement_.device, placement_.stream, Deadline::After(kDrainTimeout));
  if (!drained.ok()) {
    CHORUS_LOG(kWarn, "cuda") << "copies between a CUDA device and pinned memory did not finish "
                                 "after a failed collective ("
                              << drained.message() << "); its pinned memory is kept out of use";
    send_.host.Abandon();
    recv_.host.Abandon();
  }
  return drained;
}

absl::Status StagedPipeline::Run(
    Deadline deadline, absl::FunctionRef<absl::Status(const CollectiveArgs& segment)> run_segment,
    absl::FunctionRef<absl::Status(const absl::Status& error, absl::string_view step)>
        copy_failed) {
  const size_t segments = SegmentCount();
  auto wait = [&] { return runtime_->WaitStream(placement_.device, placement_.stream, deadline); };
  // Segment 0 must be in before anything runs; segment 1's copy runs beside segment 0.
  absl::Status copied = QueueIn(0);
  if (copied.ok()) copied = wait();
  if (copied.ok() && segments > 1) copied = QueueIn(1);
  if (!copied.ok()) {
    Drain().IgnoreError();  // a failed copy may leave earlier ones queued
    return copy_failed(copied, "copying in");
  }
  for (size_t index = 0; index < segments; ++index) {
    const absl::Status ran = run_segment(Segment(index));
    if (!ran.ok()) {
      Drain().IgnoreError();
      return ran;
    }
    // Segment index+1 is in and segment index-1 is out once the stream has drained.
    absl::Status queued = wait();
    if (queued.ok()) queued = QueueOut(index);
    if (queued.ok() && index + 2 < segments) queued = QueueIn(index + 2);
    if (!queued.ok()) {
      Drain().IgnoreError();
      return copy_failed(queued, "copying to and from");
    }
  }
  const absl::Status out = wait();
  if (out.ok()) return out;
  Drain().IgnoreError();
  return copy_failed(out, "copying the result back to");
}

}  // namespace chorus
