// Folding a non-power-of-two rank count for the recursive algorithms: the first 2 * extra
// ranks pair up, the even one of each pair hands its data to the odd one and sits out, and the
// remaining `active` ranks (a power of two) run the algorithm. Active rank i stands for the
// original ranks [FirstRank(i), FirstRank(i + 1)): two for the first `extra` actives, one for
// the others, so a range of actives always covers a contiguous range of ranks' blocks.
#ifndef CHORUS_COLLECTIVES_ENGINE_FOLD_H_
#define CHORUS_COLLECTIVES_ENGINE_FOLD_H_

#include "absl/container/inlined_vector.h"

namespace chorus {

// A value type.
struct Fold {
  explicit Fold(int ranks) : ranks(ranks) {
    active = 1;
    while (active * 2 <= ranks) active *= 2;
    extra = ranks - active;
  }

  // The index of `rank` among the active ranks, or -1 when it sits out.
  int ActiveIndex(int rank) const {
    if (rank < 2 * extra) return rank % 2 == 1 ? rank / 2 : -1;
    return rank - extra;
  }
  int RankOf(int index) const { return index < extra ? 2 * index + 1 : index + extra; }
  int FirstRank(int index) const { return index < extra ? 2 * index : index + extra; }
  // log2(active): the number of recursive rounds.
  int Rounds() const {
    int rounds = 0;
    while ((1 << rounds) < active) ++rounds;
    return rounds;
  }

  // The ranks `rank` sends to over a recursive algorithm's run: its partner in each round and
  // the folded rank it holds, or for a folded rank the one that holds it.
  absl::InlinedVector<int, 8> Peers(int rank) const {
    absl::InlinedVector<int, 8> peers;
    const int index = ActiveIndex(rank);
    if (index < 0) {
      peers.push_back(rank + 1);
      return peers;
    }
    for (int round = 0; round < Rounds(); ++round) peers.push_back(RankOf(index ^ (1 << round)));
    if (index < extra) peers.push_back(FirstRank(index));
    return peers;
  }

  int ranks;
  int active;
  int extra;
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_ENGINE_FOLD_H_
