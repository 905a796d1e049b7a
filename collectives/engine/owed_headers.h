// The header check that collectives over messages leave to the communicator's later calls.
//
// Without shared slots, the rank at the first position of the header ring (header_ring.h)
// does not wait for its predecessor's header in a small call: the other ranks' checks along
// the rest of the ring already see every disagreement (context.h). The predecessor sends it
// the header of every CollectiveContext::kHeaderCheckInterval-th call only, and this rank
// receives and checks it in the next such call of its own. So a root runs ahead of its slowest
// peer by fewer than twice that many calls: what it sends ahead stays bounded, and a peer that
// stalls stops the root at the deadline of a later call.
//
// Thread-safe.
#ifndef CHORUS_COLLECTIVES_ENGINE_OWED_HEADERS_H_
#define CHORUS_COLLECTIVES_ENGINE_OWED_HEADERS_H_

#include <cstdint>
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

  // Leaves `newest` to a later call, and returns the check left before it, if any: the
  // caller's to make now.
  std::optional<Owed> Exchange(const Owed& newest);

 private:
  std::mutex mu_;
  std::optional<Owed> owed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_ENGINE_OWED_HEADERS_H_
