// What verbs peers exchange: the address each rank publishes through the store, the header at
// the start of every eager slot, and the 32-bit immediate of every RDMA write. Pure encoding,
// no verbs calls, so it is unit-tested without a device.
//
// Every message goes as an RDMA WRITE WITH IMMEDIATE: into one of the receiver's eager slots
// (the immediate names the slot; the slot's header says what it carries), or empty (the
// immediate alone returns credits). Receive work requests carry no
// buffer, so any of them takes any write, and the receiver keeps more of them posted than it
// can be sent (slots plus the few control writes), so a sender never meets receiver-not-ready.
#ifndef CHORUS_TRANSPORT_IBVERBS_WIRE_H_
#define CHORUS_TRANSPORT_IBVERBS_WIRE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace chorus::ibverbs {

// One peer's receiving side of the queue pair a rank keeps for it.
struct PeerEndpoint {
  uint32_t qp_num = 0;
  uint64_t ring_address = 0;  // the eager slots this rank receives the peer's messages into
  uint32_t ring_rkey = 0;
};

// What a rank publishes for one mesh.
struct PublishedAddress {
  std::array<uint8_t, 16> gid{};
  uint16_t lid = 0;
  uint8_t link_layer = 0;  // IBV_LINK_LAYER_*
  uint32_t mtu_bytes = 0;  // the path MTU this rank can use (its port's active MTU or less)
  uint32_t psn = 0;        // the first packet sequence number of its sends
  uint64_t mesh_id = 0;
  uint32_t slots = 0;
  uint32_t slot_bytes = 0;
  // RDMA reads its queue pairs answer at once (max_dest_rd_atomic): a peer reads no deeper.
  uint32_t read_depth = 0;
  std::string device;  // for error messages: "rxe1 port 1"
  // Its process, and the host identity (core/host_identity.h) that says whether the pid can be
  // looked at from another rank's process.
  std::string host;
  uint32_t pid = 0;
  std::vector<PeerEndpoint> endpoints;  // index = peer rank; the rank's own entry is empty
};

std::string FormatPublishedAddress(const PublishedAddress& address);
// InvalidArgument when `text` is not what FormatPublishedAddress writes.
absl::StatusOr<PublishedAddress> ParsePublishedAddress(absl::string_view text);
// "::ffff:10.11.0.2" style text of a GID.
std::string GidToString(const std::array<uint8_t, 16>& gid);

// --- Immediates ---
enum class ImmediateKind : uint32_t {
  kSlot = 0,     // value: the slot index the write filled
  kCredits = 1,  // value: the writer's count of freed slots (mod 2^30)
};
inline constexpr uint32_t kImmediateValueMask = (1u << 30) - 1;

inline uint32_t MakeImmediate(ImmediateKind kind, uint32_t value) {
  return (static_cast<uint32_t>(kind) << 30) | (value & kImmediateValueMask);
}
inline ImmediateKind ImmediateKindOf(uint32_t immediate) {
  return static_cast<ImmediateKind>(immediate >> 30);
}
inline uint32_t ImmediateValue(uint32_t immediate) { return immediate & kImmediateValueMask; }

// --- Slots ---
enum class SlotKind : uint8_t {
  kData = 1,      // a message, or one fragment of a message sent by copy
  kAnnounce = 2,  // a large message: read it from (address, rkey)
  kDone = 3,      // the receiver has finished reading message `send_id`
};

// At the start of every slot; the payload of kData follows it.
struct SlotHeader {
  SlotKind kind = SlotKind::kData;
  uint8_t reserved[3] = {};
  uint32_t credits = 0;  // the writer's count of freed slots (mod 2^30), riding along
  uint64_t tag = 0;
  uint64_t message_bytes = 0;   // kData, kAnnounce: the whole message's length
  uint64_t offset = 0;          // kData: where this fragment starts in the message
  uint32_t fragment_bytes = 0;  // kData: payload bytes in this slot
  uint32_t send_id = 0;         // kData fragments, kAnnounce, kDone: the sender's message id
  uint64_t address = 0;         // kAnnounce: the sender's buffer
  uint32_t rkey = 0;            // kAnnounce
  uint8_t reserved2[12] = {};
};
static_assert(sizeof(SlotHeader) == 64, "a slot header is one cache line");
inline constexpr size_t kSlotHeaderBytes = sizeof(SlotHeader);

// Whether `header`, read from a slot of `slot_bytes`, is well formed: a known kind, and a
// fragment that fits the slot and its message. A peer that writes anything else is broken.
bool SlotHeaderValid(const SlotHeader& header, size_t slot_bytes);

}  // namespace chorus::ibverbs

#endif  // CHORUS_TRANSPORT_IBVERBS_WIRE_H_
