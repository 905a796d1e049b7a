// The header ring (collectives/engine/header_ring.h): a cycle through every rank, whose edges
// are the recursive algorithms' partners, and which keeps aligned blocks of ranks together.
#include "chorus/collectives/engine/header_ring.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <vector>

#include "chorus/collectives/engine/fold.h"

namespace chorus::testing {
namespace {

constexpr int kMostRanks = 70;

TEST_CASE("the header ring is one cycle through every rank", "[header_ring]") {
  for (int size = 1; size <= kMostRanks; ++size) {
    const HeaderRing ring(size);
    REQUIRE(ring.size() == size);
    std::vector<bool> seen(size, false);
    int rank = 0;
    for (int step = 0; step < size; ++step) {  // following Next from rank 0 meets every rank once
      INFO(size << " ranks, step " << step);
      REQUIRE_FALSE(seen[rank]);
      seen[rank] = true;
      CHECK(ring.RankAt(ring.PositionOf(rank)) == rank);
      CHECK(ring.Prev(ring.Next(rank)) == rank);
      rank = ring.Next(rank);
    }
    CHECK(rank == 0);
    CHECK(ring.RankAt(-1) == ring.RankAt(size - 1));
  }
}

TEST_CASE("a rank's ring successor is a partner of the recursive algorithms", "[header_ring]") {
  for (int size = 2; size <= kMostRanks; ++size) {
    const HeaderRing ring(size);
    const Fold fold(size);
    for (int rank = 0; rank < size; ++rank) {
      INFO(size << " ranks, rank " << rank);
      const auto peers = fold.Peers(rank);
      if (fold.ActiveIndex(rank) >= 0) {
        CHECK(std::count(peers.begin(), peers.end(), ring.Next(rank)) == 1);
      } else {  // folded away: the rank holding it sends it the result, and its header with it
        CHECK(ring.Prev(rank) == rank + 1);
      }
    }
  }
}

TEST_CASE("the header ring keeps every aligned block of ranks together", "[header_ring]") {
  // Ranks laid out host by host, a power of two per host, leave each host once on the ring.
  for (int size = 2; size <= 64; size *= 2) {
    const HeaderRing ring(size);
    for (int block = 2; block < size; block *= 2) {
      for (int first = 0; first < size; first += block) {
        int lowest = size, highest = -1;
        for (int rank = first; rank < first + block; ++rank) {
          lowest = std::min(lowest, ring.PositionOf(rank));
          highest = std::max(highest, ring.PositionOf(rank));
        }
        INFO(size << " ranks, block of " << block << " from rank " << first);
        CHECK(highest - lowest == block - 1);
      }
    }
  }
}

}  // namespace
}  // namespace chorus::testing
