// The large messages one peer is sending this rank through the staging area of its area in our
// inbox, chunk by chunk.
//
// Owns the transfers under way (one per rendezvous slot of the sender), where each one's bytes
// go, and the count of chunks consumed, which it hands back to the sender as staging space. A
// transfer's bytes go to the receive it was matched to, into a buffer of ours when it is pulled
// before any receive was posted (a matched receive can take that over mid-way), or nowhere
// once its receive was cancelled (the sender still streams the rest, which is drained). The
// engine decides when a transfer starts and what its end means (completing the receive, or
// turning the pulled message into plain data) and answers the sender.
//
// Thread-compatible: the engine's mutex guards it with the rest of the peer's state.
#ifndef CHORUS_TRANSPORT_SHM_INBOUND_STREAMS_H_
#define CHORUS_TRANSPORT_SHM_INBOUND_STREAMS_H_

#include <cstdint>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "chorus/transport/request.h"
#include "chorus/transport/shm/bytes.h"
#include "chorus/transport/shm/layout.h"
#include "chorus/transport/shm/ring.h"

namespace chorus::shm {

class ShmRequest;

class InboundStreams {
 public:
  struct Stream {
    enum class Into {
      kRequest,  // the matched receive (its buffer, or its sink)
      kHeld,     // `held`: pulled before any receive was posted
      kDiscard,  // the receive was cancelled or too small: drain and drop the rest
    };
    Into into = Into::kRequest;
    std::shared_ptr<ShmRequest> request;
    Bytes held;
    Tag tag = 0;
    uint32_t slot_ref = 0;
    uint64_t length = 0;
    uint64_t received = 0;
  };
  enum class ChunkResult {
    kInvalid,   // continues no transfer: a protocol error of the sender
    kPartial,   // taken; more of its transfer is to come
    kComplete,  // taken, and its transfer is whole
  };

  InboundStreams() = default;
  // `area`: the sender's area in this rank's inbox, whose staging chunks it reads.
  explicit InboundStreams(const AreaView& area) : area_(area) {}

  // Starts the transfer of the `length` bytes announced in `slot_ref` into `request`.
  void StartInto(uint32_t slot_ref, std::shared_ptr<ShmRequest> request, Tag tag, uint64_t length);
  // Starts pulling the `length` bytes announced in `slot_ref` into a buffer of ours.
  void StartPull(uint32_t slot_ref, Tag tag, uint64_t length);
  // A receive matched the message being pulled in `slot_ref`: what has arrived so far moves
  // into it, and the rest streams straight to it.
  void TakeOver(uint32_t slot_ref, std::shared_ptr<ShmRequest> request);
  // The rest of the transfer in `slot_ref` is drained and dropped.
  void Discard(uint32_t slot_ref);
  // Takes the chunk `record` describes from the staging area and releases the chunk. Once its
  // transfer is whole, the transfer leaves this object and is moved into `*finished`.
  ChunkResult OnChunk(const Record& record, Stream* finished);

  // Calls `fail(request)` for each transfer into a receive, then Clear().
  template <typename Fn>
  void FailAll(Fn&& fail) {
    for (const auto& [slot, stream] : streams_) {
      if (stream.into == Stream::Into::kRequest) fail(*stream.request);
    }
    Clear();
  }
  void Clear() { streams_.clear(); }

 private:
  AreaView area_;
  uint64_t chunks_consumed_ = 0;
  absl::flat_hash_map<int, Stream> streams_;  // by slot index
};

}  // namespace chorus::shm

#endif  // CHORUS_TRANSPORT_SHM_INBOUND_STREAMS_H_
