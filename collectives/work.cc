#include "chorus/collectives/work.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"

namespace chorus {

Work::Work(CollectiveKind kind, uint64_t sequence, std::string algorithm, std::string description)
    : kind_(kind),
      sequence_(sequence),
      algorithm_(std::move(algorithm)),
      description_(std::move(description)) {}

absl::Status Work::Wait(absl::Duration timeout) {
  const Deadline until = Deadline::After(timeout);
  RequestPtr request;
  {
    std::lock_guard<std::mutex> lock(mu_);
    request = request_;
  }
  if (request != nullptr) {
    // Point-to-point: wait on the request itself (outside mu_, so Abort stays prompt).
    Deadline op_deadline = Deadline::Infinite();
    {
      std::lock_guard<std::mutex> lock(mu_);
      op_deadline = deadline_;
    }
    request->Wait(until.Min(op_deadline)).IgnoreError();
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) {
      if (request->IsDone()) {
        status_ = finish_(*request);
      } else if (op_deadline.Expired()) {
        request->Cancel();
        status_ = DeadlineExceededError(
            absl::StrCat(description_,
                         " did not complete before its deadline; check that the "
                         "peer posts the matching operation"),
            request->peer());
      } else {
        return DeadlineExceededError(absl::StrCat(description_, " is still running after ",
                                                  absl::FormatDuration(timeout),
                                                  " (wait again, or Abort it)"));
      }
      done_ = true;
    }
    return status_;
  }
  std::unique_lock<std::mutex> lock(mu_);
  auto done = [this] { return done_; };
  if (timeout == absl::InfiniteDuration()) {
    done_cv_.wait(lock, done);
  } else if (!done_cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), done)) {
    return DeadlineExceededError(
        absl::StrCat(description_, " is still running after ", absl::FormatDuration(timeout),
                     " (it goes on until its own deadline; wait again, or Abort it)"));
  }
  return status_;
}

bool Work::Test() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ || (request_ != nullptr && request_->IsDone());
}

int Work::peer() const {
  std::lock_guard<std::mutex> lock(mu_);
  return request_ != nullptr && request_->IsDone() ? request_->peer() : -1;
}

void Work::Abort() {
  // The cancel function runs under mu_ so that Detach(), which the runner calls before its
  // context goes away, cannot return while a cancel is still using that context. Cancelling
  // only completes transport requests; it never takes this mutex.
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return;
  abort_requested_ = true;
  if (cancel_) cancel_();
  if (request_ != nullptr) request_->Cancel();
}

bool Work::Attach(std::function<void()> cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  if (abort_requested_) return false;
  cancel_ = std::move(cancel);
  return true;
}

void Work::Detach() {
  std::lock_guard<std::mutex> lock(mu_);
  cancel_ = nullptr;
}

void Work::Complete(absl::Status status) {
  // An Abort() that raced with a successful finish leaves the success: the data is there.
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(status);
    done_ = true;
  }
  done_cv_.notify_all();
}

}  // namespace chorus

namespace chorus {

void Work::BindRequest(RequestPtr request, std::function<absl::Status(const Request&)> finish,
                       Deadline deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  request_ = std::move(request);
  finish_ = std::move(finish);
  deadline_ = deadline;
}

}  // namespace chorus
