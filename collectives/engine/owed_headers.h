// Header checks that collectives over messages leave to the communicator's later calls.
//
// Without shared slots, the rank at the first position of the header ring (header_ring.h)
// does not wait for its predecessor's header in a small call where it receives nothing from
// that rank (a broadcast or scatter root): the other ranks' checks along the rest of the ring
// already see every disagreement (context.h). The header still comes, as a message of its
// own; a later call of this rank receives it and checks it, the oldest first, once more than
// CollectiveContext::kHeaderChecksAhead are owed. So a root runs that many calls ahead of its
// slowest peer and no more: what it sends ahead stays bounded, and a peer that stalls stops
// the root at the deadline of a later call.
//
// Thread-safe.
#ifndef CHORUS_COLLECTIVES_ENGINE_OWED_HEADERS_H_
#define CHORUS_COLLECTIVES_ENGINE_OWED_HEADERS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "chorus/collectives/engine/header.h"

namespace chorus {

class OwedHeaders {
 public:
  // `peer`'s header for the collective numbered `sequence`, whose own header was `mine`.
  struct Owed {
    int peer = -1;
    uint32_t sequence = 0;
    CollectiveHeader::Wire mine{};
  };

  void Owe(const Owed& owed);
  // The oldest check owed, taken off the list, while more than `keep` are owed.
  std::optional<Owed> TakeBeyond(size_t keep);

 private:
  std::mutex mu_;
  std::deque<Owed> owed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_ENGINE_OWED_HEADERS_H_
