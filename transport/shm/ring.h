// The single-producer/single-consumer record ring of one directed pair (see layout.h).
//
// A record is a 32-byte header, optionally followed by a payload, padded to 32 bytes. Records
// never wrap: when one does not fit before the end of the ring, the writer fills the rest with a
// pad record and starts again at offset 0. The producer publishes with a release store of
// `tail`; the consumer frees space with a release store of `head`.
#ifndef CHORUS_TRANSPORT_SHM_RING_H_
#define CHORUS_TRANSPORT_SHM_RING_H_

#include <cstddef>
#include <cstdint>

#include "chorus/transport/shm/layout.h"

namespace chorus::shm {

enum class RecordType : uint32_t {
  kPad = 1,      // skip `length` bytes (the rest of the ring)
  kEager,        // a whole message: tag, length, payload follows
  kAnnounce,     // a large message: tag, length, arg = sender's buffer address, slot_ref
  kClearToSend,  // receiver -> sender: stream slot_ref through the staging area
  kChunk,        // sender -> receiver: next staging chunk of slot_ref, length bytes at offset arg
  kFinished,     // receiver -> sender: done with slot_ref; length = FinishOutcome
};

enum FinishOutcome : uint64_t {
  kFinishDelivered = 0,   // the receiver took the data
  kFinishDiscarded = 1,   // the receiver dropped it (too long for the posted buffer)
  kFinishReadFailed = 2,  // the receiver could not read the sender's buffer
};

struct Record {
  RecordType type;
  uint32_t slot_ref;  // (generation << 8) | slot index, for the rendezvous records
  uint64_t tag;
  uint64_t length;
  uint64_t arg;
};
static_assert(sizeof(Record) == 32, "records are 32-byte units");

constexpr uint64_t kRecordUnit = 32;

inline uint32_t SlotRef(uint32_t generation, int slot) {
  return ((generation & kSlotGenerationMask) << 8) | static_cast<uint32_t>(slot);
}
inline int SlotIndex(uint32_t slot_ref) { return static_cast<int>(slot_ref & 0xff); }
inline uint32_t SlotGeneration(uint32_t slot_ref) { return slot_ref >> 8; }

// Producer side. Thread-compatible: the owner serializes calls.
class RingWriter {
 public:
  RingWriter() = default;
  explicit RingWriter(const AreaView& area);

  // The largest payload one record may carry: a quarter of the ring, so a pad never blocks it.
  uint64_t max_payload() const { return area_.ring_bytes / 4; }

  // Appends a record (with `payload_bytes` of payload) if it fits now; false if the ring is too
  // full. Publishes it at once.
  bool TryWrite(const Record& record, const void* payload = nullptr, uint64_t payload_bytes = 0);

 private:
  AreaView area_;
  uint64_t tail_ = 0;
  uint64_t head_seen_ = 0;  // the consumer's head as last read; refreshed when space runs out
};

// Consumer side. Thread-compatible: the owner serializes calls.
class RingReader {
 public:
  RingReader() = default;
  explicit RingReader(const AreaView& area);

  // The next record (its payload follows it), or nullptr if none is published. A record whose
  // size field is impossible sets `corrupt` and returns nullptr.
  const Record* Next(bool* corrupt);
  // Frees the record Next() returned.
  void Consume(const Record& record);

 private:
  AreaView area_;
  uint64_t head_ = 0;
  uint64_t tail_seen_ = 0;
};

}  // namespace chorus::shm

#endif  // CHORUS_TRANSPORT_SHM_RING_H_
