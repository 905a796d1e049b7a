#include "chorus/transport/tcp/tcp_request.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "chorus/transport/poll_window.h"

namespace chorus::tcp {
namespace {

// A sleeping driver wakes at least this often even if nothing happens, as a safety net for
// completions that happen without an event (all of them also call Wake).
constexpr int kMaxSleepMs = 100;
// A waiter that finds another thread driving sleeps on its own request in slices this long,
// then tries to take over driving.
constexpr absl::Duration kFollowerSlice = absl::Milliseconds(1);
// While spinning, yield the core every this many polls so oversubscribed ranks progress.
constexpr int kPollsPerYield = 4;

}  // namespace

TcpRequest::TcpRequest(RequestKind kind, int peer, Tag tag, std::shared_ptr<ProgressEngine> engine,
                       std::shared_ptr<const std::string> peer_label)
    : Request(kind, peer, tag), engine_(std::move(engine)), peer_label_(std::move(peer_label)) {}

bool TcpRequest::Finish(absl::Status status, size_t bytes, int peer) {
  if (!Complete(std::move(status), bytes, peer)) return false;
  owner_ = nullptr;
  engine_->OnRequestCompleted(this);
  return true;
}

absl::Status TcpRequest::Wait(Deadline deadline) {
  if (!IsDone()) {
    engine_->BeginWait();
    SpinPolicy& policy = engine_->spin_policy();
    const SpinPolicy::Plan plan = policy.Next();
    PollWindow window(plan.spin);
    int polls = 0;
    bool slept = false;  // a pass after the poll budget ran out
    // At least one pass, so a wait with an expired deadline still takes what has arrived.
    do {
      const bool spinning = window.open();
      slept = slept || !spinning;
      if (engine_->TryAcquireDriver()) {
        // While spinning on a receive whose socket is known, read that socket directly, and
        // poll the whole engine (every socket, timers) one pass in kPollsPerYield.
        const uint64_t hint = read_hint_.load(std::memory_order_relaxed);
        const bool read_directly =
            spinning && hint != 0 && polls % kPollsPerYield != kPollsPerYield - 1;
        if (!read_directly || !engine_->ReadHandler(hint)) {
          engine_->PollOnce(spinning ? 0 : deadline.RemainingMillis(kMaxSleepMs), this);
        }
        engine_->ReleaseDriver();
        if (spinning && ++polls % kPollsPerYield == 0) window.Yield();
      } else if (spinning) {
        window.Yield();
      } else if (!deadline.Expired()) {
        AwaitDone(deadline.Min(Deadline::After(kFollowerSlice)));
      }
    } while (!IsDone() && !deadline.Expired());
    policy.Record(plan, IsDone() && !slept);
    engine_->EndWait();
  }
  if (!IsDone()) {
    return DeadlineExceededError(
        absl::StrCat(kind() == RequestKind::kSend ? "send to " : "receive from ", *peer_label_,
                     " (tag ", absl::Hex(tag()),
                     ") did not complete before its deadline; that rank may be stalled, slow, "
                     "or not posting the matching ",
                     kind() == RequestKind::kSend ? "receive" : "send"),
        peer());
  }
  return status();
}

void TcpRequest::Cancel() {
  if (IsDone()) return;
  auto lock = engine_->LockForPosting();
  if (IsDone()) return;
  if (owner_ != nullptr) owner_->CancelLocked(*this);
  Finish(AbortedError(absl::StrCat(kind() == RequestKind::kSend ? "send to " : "receive from ",
                                   *peer_label_, " (tag ", absl::Hex(tag()), ") was cancelled"),
                      peer()),
         0);
}

}  // namespace chorus::tcp
