// The cycle along which every rank sends its collective header to one peer and checks the one
// from another (context.h, "Header protocol"), so that a disagreement between any two ranks
// shows between some pair of neighbours on it. It depends on the rank count alone: ranks that
// disagree about everything else still agree on it.
//
// The cycle is the reflected Gray code over the ranks that the recursive algorithms keep
// active (fold.h), each followed by the rank folded into it. Consecutive Gray codes differ in
// one bit, so an active rank's successor is one of its recursive doubling partners (or, when
// it holds a folded rank, that rank, which it sends the result to), and recursive doubling's
// header rides on data it sends anyway instead of in a message of its own; only a folded
// rank's header goes alone. Trees and the dissemination barrier number the ranks by their
// position on the cycle, which keeps their message count; the ring algorithms keep rank order
// and send the header alone. For a power-of-two rank count the cycle visits every aligned
// power-of-two block of ranks in one stretch, as a plain ring does, so ranks laid out host by
// host, a power of two per host, leave each host once (other layouts may leave a host more
// often than in rank order: only headers take those extra hops). A communicator without shared
// slots checks headers along the cycle less the edge back to its first position (context.h).
#ifndef CHORUS_COLLECTIVES_ENGINE_HEADER_RING_H_
#define CHORUS_COLLECTIVES_ENGINE_HEADER_RING_H_

#include <vector>

namespace chorus {

// A value type; immutable once built.
class HeaderRing {
 public:
  explicit HeaderRing(int size);

  int size() const { return static_cast<int>(order_.size()); }
  // The rank at `position` (taken modulo size()) and the position of `rank`.
  int RankAt(int position) const;
  int PositionOf(int rank) const { return position_[rank]; }
  // The rank this one sends its header to, and the one it checks a header from.
  int Next(int rank) const { return RankAt(PositionOf(rank) + 1); }
  int Prev(int rank) const { return RankAt(PositionOf(rank) - 1); }

 private:
  std::vector<int> order_;     // ranks by position
  std::vector<int> position_;  // positions by rank
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_ENGINE_HEADER_RING_H_
