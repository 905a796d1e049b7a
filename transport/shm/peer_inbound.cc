#include "chorus/transport/shm/peer_inbound.h"

#include <utility>

#include "absl/status/statusor.h"
#include "chorus/core/logging.h"

namespace chorus::shm {

int PeerInbound::UnclaimedSlots() const {
  int unclaimed = 0;
  for (const std::atomic<uint32_t>& word : area_.control->slots) {
    unclaimed += SlotStateOf(word.load(std::memory_order_relaxed)) == kSlotPosted ? 1 : 0;
  }
  return unclaimed;
}

bool PeerInbound::Claim(uint32_t slot_ref, SlotState state) {
  const uint32_t generation = SlotGeneration(slot_ref);
  uint32_t expected = SlotWord(generation, kSlotPosted);
  return area_.control->slots[SlotIndex(slot_ref)].compare_exchange_strong(
      expected, SlotWord(generation, state), std::memory_order_acq_rel);
}

void PeerInbound::FinishRead(uint32_t slot_ref) {
  area_.control->slots[SlotIndex(slot_ref)].store(SlotWord(SlotGeneration(slot_ref), kSlotDone),
                                                  std::memory_order_release);
}

const char* PeerInbound::InArena(const InboxHeader& header, pid_t pid, int peer, int rank,
                                 uint64_t address, uint64_t length) {
  if (arena_ == nullptr) {
    if (arena_failed_) return nullptr;
    Arena::Identity identity;
    identity.bytes = header.arena_bytes.load(std::memory_order_acquire);
    if (identity.bytes == 0) return nullptr;  // the peer has no arena (yet)
    identity.fd = header.arena_fd;
    identity.base = header.arena_base;
    identity.nonce = header.arena_nonce;
    absl::StatusOr<std::unique_ptr<Mapping>> mapping = MapPeerArena(pid, identity, peer);
    if (!mapping.ok()) {
      CHORUS_LOG(kWarn, "shm") << "rank " << rank << ": " << mapping.status().message()
                               << "; its shared-memory buffers travel like private ones";
      arena_failed_ = true;
      return nullptr;
    }
    CHORUS_LOG(kInfo, "shm") << "rank " << rank << ": reads rank " << peer
                             << "'s shared-memory buffers in place";
    arena_ = std::move(mapping).value();
    arena_base_ = identity.base;
  }
  if (!RangeInside(arena_base_, arena_->bytes(), address, length)) return nullptr;
  return arena_->data() + (address - arena_base_);
}

}  // namespace chorus::shm
