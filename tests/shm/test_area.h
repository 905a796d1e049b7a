// An area in ordinary memory, laid out like one in an inbox, for tests of the parts that read
// or write an area (the ring, the staging transfers) without an inbox or a peer.
#ifndef CHORUS_TESTS_SHM_TEST_AREA_H_
#define CHORUS_TESTS_SHM_TEST_AREA_H_

#include <cstdint>
#include <vector>

#include "chorus/transport/shm/layout.h"

namespace chorus::shm {

// Its staging area has kStagingChunks chunks of a page each.
struct TestArea {
  explicit TestArea(uint64_t ring_bytes)
      : memory(AreaBytes(ring_bytes, kStagingChunks * kPageBytes) + kPageBytes, 0) {
    header.ring_bytes = ring_bytes;
    header.staging_bytes = kStagingChunks * kPageBytes;
    char* aligned = memory.data() + (kPageBytes - reinterpret_cast<uintptr_t>(memory.data()) %
                                                      kPageBytes) % kPageBytes;
    view = AreaView::At(aligned, header);
  }
  std::vector<char> memory;
  InboxHeader header{};
  AreaView view;
};

}  // namespace chorus::shm

#endif  // CHORUS_TESTS_SHM_TEST_AREA_H_
