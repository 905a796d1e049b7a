// A receive from any of several peers of a hybrid mesh that lie on both of its sides: one part
// posted on each inner mesh (Mesh::RecvFromAnyPart), the parts sharing a ReceiveClaim, so that
// whichever transport has a message first takes it and the other part is withdrawn unread.
#ifndef CHORUS_TRANSPORT_HYBRID_SPLIT_RECEIVE_H_
#define CHORUS_TRANSPORT_HYBRID_SPLIT_RECEIVE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "chorus/transport/transport.h"

namespace chorus {

// Thread-safe (see Request). Done when its winning part is: with that part's status, length and
// sender; or when a part fails before any message was taken (a peer died, an abort), with that
// part's error; or cancelled.
class SplitReceive final : public Request {
 public:
  struct Part {
    Mesh* mesh;
    std::vector<int> peers;
  };

  // Posts one part per entry of `parts` into the same `buffer`. `description` names the peers
  // in errors ("any of ranks [1 (shm), 3 (tcp)]").
  static RequestPtr Post(absl::Span<const Part> parts, Tag tag, MemoryRef buffer,
                         std::string description);

  // Waits for the claim on this thread's share of the progress, then on the winning part, which
  // drives its transport here; the loser is cancelled once the receive is done.
  absl::Status Wait(Deadline deadline) override;
  void Cancel() override;

  SplitReceive(Tag tag, std::string description);  // for Post (make_shared)

 private:
  // The poster's own owner number in the claim: it settles the receive by cancelling it.
  int poster() const { return static_cast<int>(parts_.size()); }
  // The index of the part that won the claim; -1 while nobody has, or when the poster did.
  int WinningPart() const;
  // Runs when part `index` completes (observer: may hold that part's transport lock).
  void OnPartDone(int index);
  // Completes this request with part `index`'s outcome (no effect if already done).
  void CompleteFrom(int index);
  void CancelLosers();

  const std::string description_;
  const std::shared_ptr<ReceiveClaim> claim_ = std::make_shared<ReceiveClaim>();
  std::vector<RequestPtr> parts_;  // set in Post before any observer runs; fixed after
};

}  // namespace chorus

#endif  // CHORUS_TRANSPORT_HYBRID_SPLIT_RECEIVE_H_
