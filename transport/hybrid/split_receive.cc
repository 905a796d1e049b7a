#include "chorus/transport/hybrid/split_receive.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"

namespace chorus {

SplitReceive::SplitReceive(Tag tag, std::string description)
    : Request(RequestKind::kRecv, -1, tag), description_(std::move(description)) {}

RequestPtr SplitReceive::Post(absl::Span<const Part> parts, Tag tag, MemoryRef buffer,
                              std::string description) {
  auto receive = std::make_shared<SplitReceive>(tag, std::move(description));
  for (size_t i = 0; i < parts.size(); ++i) {
    receive->parts_.push_back(parts[i].mesh->RecvFromAnyPart(parts[i].peers, tag, buffer,
                                                             receive->claim_, static_cast<int>(i)));
  }
  // Weak: a part may outlive the receive in its transport's queue until it is withdrawn.
  const std::weak_ptr<SplitReceive> weak = receive;
  for (size_t i = 0; i < parts.size(); ++i) {
    receive->parts_[i]->OnCompletion([weak, i] {
      if (std::shared_ptr<SplitReceive> alive = weak.lock()) alive->OnPartDone(static_cast<int>(i));
    });
  }
  return receive;
}

void SplitReceive::OnPartDone(int index) {
  // A part that completes without having taken a message (its peer failed, its mesh was
  // aborted) claims the receive for its error, so the other part cannot take one afterwards;
  // a part withdrawn because the other won finds the claim taken and changes nothing.
  claim_->TryClaim(index);
  if (claim_->winner() == index) CompleteFrom(index);
}

int SplitReceive::WinningPart() const {
  const int winner = claim_->winner();
  return winner >= 0 && winner < poster() ? winner : -1;
}

void SplitReceive::CompleteFrom(int index) {
  const Request& part = *parts_[index];
  Complete(part.status(), part.bytes(), part.peer());
}

absl::Status SplitReceive::Wait(Deadline deadline) {
  // Until the claim is settled both transports progress on their own background threads, and
  // their completions reach this request through OnPartDone; this thread checks the claim
  // every millisecond so that it can then drive the winner's transport itself.
  constexpr absl::Duration kClaimCheckInterval = absl::Milliseconds(1);
  while (!IsDone()) {
    const int winner = WinningPart();
    if (winner >= 0) {
      // Not done, `waited` is the deadline, which the error below reports naming every peer
      // of the receive; done, it is the part's status, which CompleteFrom takes over.
      const absl::Status waited = parts_[winner]->Wait(deadline);
      if (!parts_[winner]->IsDone()) break;
      CompleteFrom(winner);
    } else if (!AwaitDone(deadline.Min(Deadline::After(kClaimCheckInterval))) &&
               deadline.Expired()) {
      break;
    }
  }
  if (!IsDone()) {
    return DeadlineExceededError(absl::StrCat("receive from ", description_, " (tag ",
                                              absl::Hex(tag()),
                                              ") did not complete before its deadline"));
  }
  CancelLosers();
  return status();
}

void SplitReceive::Cancel() {
  if (claim_->TryClaim(poster())) {
    Complete(AbortedError(absl::StrCat("receive from ", description_, " (tag ", absl::Hex(tag()),
                                       ") was cancelled")),
             0);
  }
  // A part that won may be copying its message: its Cancel returns once it no longer touches
  // the buffer, done either way; then this request takes its outcome (if its observer, on the
  // thread that completed it, has not yet).
  for (const RequestPtr& part : parts_) {
    if (!part->IsDone()) part->Cancel();
  }
  const int winner = WinningPart();
  if (winner >= 0) CompleteFrom(winner);
}

void SplitReceive::CancelLosers() {
  const int winner = claim_->winner();
  for (int i = 0; i < poster(); ++i) {
    if (i != winner && !parts_[i]->IsDone()) parts_[i]->Cancel();
  }
}

}  // namespace chorus
