// One receive posted on several meshes at once: a hybrid mesh's RecvFromAny over peers of both
// its transports posts one part on each, and the parts share a ReceiveClaim. A transport takes
// a message for a part only after the part has won the claim, so of all the parts exactly one
// consumes a message; the others are withdrawn without touching the buffer.
#ifndef CHORUS_TRANSPORT_RECEIVE_CLAIM_H_
#define CHORUS_TRANSPORT_RECEIVE_CLAIM_H_

#include <atomic>

#include "absl/status/status.h"

namespace chorus {

// Thread-safe and lock-free, so transports may call it under their own locks: holding it never
// waits for another transport's lock, only (briefly) for another part's tentative hold.
class ReceiveClaim {
 public:
  static constexpr int kNobody = -1;

  // Wins the claim for `owner` (a part's index, or whoever else may settle the receive: the
  // poster cancelling it). True if `owner` has won it, now or before; false once another owner
  // has, so it is true for exactly one owner. While another owner holds it tentatively (below)
  // this waits for that hold to be settled.
  bool TryClaim(int owner);

  // A tentative claim, for a transport that must first take the message from its sender and
  // can find it withdrawn there (a send cancelled at the last moment): Hold, then Confirm once
  // the message is taken, or Release when it turns out not to exist. Hold fails like TryClaim.
  // Between Hold and Confirm/Release the holder must not wait for another part's thread: those
  // threads spin on the hold, perhaps under their transports' locks.
  bool Hold(int owner);
  void Confirm(int owner);
  void Release();

  // Who won, or kNobody while nobody has (also while a hold is pending).
  int winner() const;
  // True once an owner other than `owner` has won: a part about to be posted need not be.
  bool WonByAnother(int owner) const {
    const int won = winner();
    return won != kNobody && won != owner;
  }

 private:
  static constexpr int kHeldBit = 1 << 30;
  bool Take(int owner, int value);

  std::atomic<int> state_{kNobody};  // kNobody, owner | kHeldBit, or owner
};

// The status of a part withdrawn because another part of its receive won the claim.
absl::Status WithdrawnPartError(int rank);

}  // namespace chorus

#endif  // CHORUS_TRANSPORT_RECEIVE_CLAIM_H_
