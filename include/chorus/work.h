// The handle of an asynchronous collective or point-to-point operation. The operation's
// buffers belong to it until it completes.
//
//   chorus::Work work = comm.AllReduceAsync(in, out, n, DataType::kFloat32, ReduceOp::kSum);
//   ... overlap other work ...
//   chorus::Status status = work.Wait();
//
// Destroying a Work whose operation has not finished aborts the operation on this rank and
// waits for it, so its buffers are free afterwards. Thread-safety: any thread may wait on, test
// or abort a Work. Move-only.
#ifndef CHORUS_WORK_H_
#define CHORUS_WORK_H_

#include <utility>

#include "chorus/chorus_c.h"
#include "chorus/detail/c_call.h"
#include "chorus/status.h"

namespace chorus {
inline namespace v0 {

class Work {
 public:
  // Waits up to `timeout_seconds` (negative: without limit) and returns the outcome. A wait that
  // runs out returns kDeadlineExceeded and the operation goes on (its own deadline fails it).
  Status Wait(double timeout_seconds = -1) {
    if (!handle_) return launch_status_;
    return detail::FromC(chorus_work_wait(handle_.get(), timeout_seconds));
  }
  // True once the operation has finished (successfully or not). Never blocks.
  bool Test() const { return !handle_ || chorus_work_test(handle_.get()) != 0; }
  // Ends the operation on this rank with kAborted; peers are not told (Communicator::Abort).
  void Abort() {
    if (handle_) chorus_work_abort(handle_.get());
  }
  // The peer of a finished point-to-point operation (the sender, for RecvFromAny); else -1.
  int peer() const { return handle_ ? chorus_work_peer(handle_.get()) : -1; }

  Work(Work&&) noexcept = default;
  Work& operator=(Work&&) noexcept = default;

 private:
  friend class Communicator;
  // A started operation (`handle`), or none and the reason (`launch_status`).
  Work(chorus_work_t* handle, Status launch_status)
      : handle_(handle), launch_status_(std::move(launch_status)) {}

  detail::Handle<chorus_work_t, chorus_work_destroy> handle_;
  Status launch_status_;  // when there is no handle: why the operation did not start
};

}  // namespace v0
}  // namespace chorus

#endif  // CHORUS_WORK_H_
