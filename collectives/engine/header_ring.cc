#include "chorus/collectives/engine/header_ring.h"

#include "chorus/collectives/engine/fold.h"
#include "chorus/collectives/engine/rank_arithmetic.h"

namespace chorus {

HeaderRing::HeaderRing(int size) : position_(size) {
  const Fold fold(size);
  order_.reserve(size);
  for (int step = 0; step < fold.active; ++step) {
    const int index = step ^ (step >> 1);
    order_.push_back(fold.RankOf(index));
    if (index < fold.extra) order_.push_back(fold.FirstRank(index));
  }
  for (int position = 0; position < size; ++position) position_[order_[position]] = position;
}

int HeaderRing::RankAt(int position) const { return order_[Mod(position, size())]; }

}  // namespace chorus
