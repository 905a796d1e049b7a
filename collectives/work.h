// The handle of an asynchronous collective or point-to-point operation.
#ifndef CHORUS_COLLECTIVES_WORK_H_
#define CHORUS_COLLECTIVES_WORK_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "chorus/collectives/collective_kind.h"
#include "chorus/core/deadline.h"
#include "chorus/transport/request.h"

namespace chorus {

// Thread-safe: any thread may wait on, test or abort a Work. (std::mutex, not absl::Mutex,
// throughout this layer: the system Abseil is not built with ThreadSanitizer, which therefore
// cannot see absl::Mutex synchronise.)
class Work {
 public:
  Work(CollectiveKind kind, uint64_t sequence, std::string algorithm, std::string description);
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  CollectiveKind kind() const { return kind_; }
  // The collective's sequence number on its communicator (0 for point-to-point).
  uint64_t sequence() const { return sequence_; }
  // The algorithm chosen ("ring", "binomial", ...; "direct" for point-to-point).
  const std::string& algorithm() const { return algorithm_; }
  // "allreduce #17 (ring, 1000 x float32 (3.9 KiB), sum)".
  const std::string& description() const { return description_; }

  // Waits up to `timeout` and returns the operation's outcome. If it is still running then,
  // returns kDeadlineExceeded and the operation continues (wait again or Abort it); the
  // operation's own deadline (CollectiveOptions::timeout) is what fails it.
  absl::Status Wait(absl::Duration timeout = absl::InfiniteDuration());

  // True once the operation has finished (successfully or not). Never blocks.
  bool Test() const;

  // Ends the operation on this rank: its pending sends and receives are cancelled and it
  // completes with kAborted (at once if it has not started). Peers are not told; to stop all
  // ranks, call Communicator::Abort. Returns promptly.
  void Abort();

  // The peer of a point-to-point operation once done (for RecvFromAny, the sender); -1
  // for collectives.
  int peer() const;

  // --- For the communicator ---
  // Collectives run elsewhere: the runner registers how to cancel the running operation
  // (false if Abort() already happened), detaches before its context goes away, and then
  // completes the work.
  bool Attach(std::function<void()> cancel);
  void Detach();
  void Complete(absl::Status status);
  // Point-to-point operations are one transport request: the work is done when the request
  // is, `finish` turns the request's outcome into the operation's status, and `deadline`
  // ends the operation (cancelling the request) when a Wait reaches it.
  void BindRequest(RequestPtr request, std::function<absl::Status(const Request&)> finish,
                   Deadline deadline);

 private:
  const CollectiveKind kind_;
  const uint64_t sequence_;
  const std::string algorithm_;
  const std::string description_;
  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool abort_requested_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::function<void()> cancel_ ABSL_GUARDED_BY(mu_);
  RequestPtr request_ ABSL_GUARDED_BY(mu_);
  std::function<absl::Status(const Request&)> finish_ ABSL_GUARDED_BY(mu_);
  Deadline deadline_ ABSL_GUARDED_BY(mu_) = Deadline::Infinite();
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_WORK_H_
