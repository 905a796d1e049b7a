#include "chorus/transport/request.h"

#include <sched.h>

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "chorus/core/env.h"
#include "chorus/core/status.h"

namespace chorus {
namespace {

// The spin of the default Wait, read once: it runs on every wait of transports without a
// progress loop of their own (inproc), where reading the environment would cost more than
// the spin saves.
absl::Duration DefaultWaitSpin() {
  static const absl::Duration spin = WaitSpinFromEnv().value_or(kDefaultWaitSpin);
  return spin;
}

}  // namespace

absl::StatusOr<absl::Duration> WaitSpinFromEnv(absl::string_view transport_variable) {
  CHORUS_ASSIGN_OR_RETURN(
      int64_t spin_us,
      GetEnvInt("CHORUS_SPIN_US", absl::ToInt64Microseconds(kDefaultWaitSpin), 0, 1000000));
  if (!transport_variable.empty()) {
    CHORUS_ASSIGN_OR_RETURN(spin_us,
                            GetEnvInt(transport_variable, spin_us, 0, 1000000));
  }
  return absl::Microseconds(spin_us);
}

absl::Status Request::status() const {
  // Complete() writes status_ once, before it sets done_ (release): once done_ reads true
  // (acquire), status_ no longer changes. Before that it is not read at all.
  if (done_.load(std::memory_order_acquire)) return status_;
  return absl::OkStatus();
}

bool Request::Complete(absl::Status status, size_t bytes, int peer) {
  if (claimed_.exchange(true, std::memory_order_acq_rel)) return false;
  status_ = std::move(status);
  if (peer >= 0) peer_.store(peer, std::memory_order_release);
  bytes_.store(bytes, std::memory_order_release);
  done_.store(true, std::memory_order_seq_cst);
  // Most requests complete while nobody is blocked on them, and then cost no lock. A waiter
  // counts itself in before it last reads done_ (both sequentially consistent), so of the two
  // either it sees done_ or this sees it; the lock then orders the notify after its wait began.
  if (blocked_waiters_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    done_cv_.notify_all();
  }
  // The same handshake with OnCompletion: it sets observed_ before it reads done_.
  if (observed_.load(std::memory_order_seq_cst)) RunObserver();
  return true;
}

void Request::OnCompletion(std::function<void()> observer) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    observer_ = std::move(observer);
  }
  observed_.store(true, std::memory_order_seq_cst);
  if (done_.load(std::memory_order_seq_cst)) RunObserver();
}

void Request::RunObserver() {
  std::function<void()> observer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    observer.swap(observer_);
  }
  if (observer) observer();
}

bool Request::AwaitDone(Deadline deadline) {
  if (IsDone()) return true;
  const auto spin_until =
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(DefaultWaitSpin());
  int polls = 0;
  while (std::chrono::steady_clock::now() < spin_until) {
    if (IsDone()) return true;
    if (++polls % 64 == 0) sched_yield();
  }
  blocked_waiters_.fetch_add(1, std::memory_order_seq_cst);
  bool done;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto is_done = [this] { return done_.load(std::memory_order_seq_cst); };
    if (deadline.IsInfinite()) {
      done_cv_.wait(lock, is_done);
      done = true;
    } else {
      done = done_cv_.wait_until(lock, deadline.time_point(), is_done);
    }
  }
  blocked_waiters_.fetch_sub(1, std::memory_order_relaxed);
  return done;
}

absl::Status Request::Wait(Deadline deadline) {
  if (!AwaitDone(deadline)) {
    return DeadlineExceededError(
        absl::StrCat(kind_ == RequestKind::kSend ? "send to" : "receive from", " rank ", peer(),
                     " (tag ", absl::Hex(tag_), ") did not complete before its deadline"),
        peer());
  }
  return status();
}

absl::Status WaitAll(absl::Span<const RequestPtr> requests, Deadline deadline) {
  // Waits on the first pending request in short slices and rescans in between, so that a
  // failure of any other request (a dead peer) is reported within a slice, not at the deadline.
  constexpr absl::Duration kRescanInterval = absl::Milliseconds(5);
  while (true) {
    Request* pending = nullptr;
    for (const RequestPtr& request : requests) {
      if (!request->IsDone()) {
        if (pending == nullptr) pending = request.get();
        continue;
      }
      CHORUS_RETURN_IF_ERROR(request->status());
    }
    if (pending == nullptr) return absl::OkStatus();
    const Deadline slice = deadline.Min(Deadline::After(kRescanInterval));
    absl::Status status = pending->Wait(slice);
    if (!status.ok() &&
        (GetErrorKind(status) != ErrorKind::kDeadlineExceeded || deadline.Expired())) {
      return status;
    }
  }
}

void CancelAll(absl::Span<const RequestPtr> requests) {
  for (const RequestPtr& request : requests) {
    if (!request->IsDone()) request->Cancel();
  }
}

namespace {

class FailedRequest final : public Request {
 public:
  FailedRequest(RequestKind kind, int peer, Tag tag, absl::Status status)
      : Request(kind, peer, tag) {
    Complete(std::move(status), 0);
  }
  void Cancel() override {}
};

}  // namespace

RequestPtr MakeFailedRequest(RequestKind kind, int peer, Tag tag, absl::Status status) {
  return std::make_shared<FailedRequest>(kind, peer, tag, std::move(status));
}

}  // namespace chorus
