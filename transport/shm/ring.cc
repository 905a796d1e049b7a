#include "chorus/transport/shm/ring.h"

#include <cstring>

namespace chorus::shm {
namespace {

uint64_t RecordBytes(uint64_t payload_bytes) {
  return kRecordUnit + (payload_bytes + kRecordUnit - 1) / kRecordUnit * kRecordUnit;
}

}  // namespace

RingWriter::RingWriter(const AreaView& area)
    : area_(area),
      tail_(area.control->tail.load(std::memory_order_relaxed)),
      head_seen_(area.control->head.load(std::memory_order_acquire)) {}

bool RingWriter::TryWrite(const Record& record, const void* payload, uint64_t payload_bytes) {
  const uint64_t capacity = area_.ring_bytes;
  const uint64_t bytes = RecordBytes(payload_bytes);
  const uint64_t offset = tail_ & (capacity - 1);
  const uint64_t to_end = capacity - offset;
  const uint64_t pad = to_end < bytes ? to_end : 0;
  if (capacity - (tail_ - head_seen_) < pad + bytes) {
    head_seen_ = area_.control->head.load(std::memory_order_acquire);
    if (capacity - (tail_ - head_seen_) < pad + bytes) return false;
  }
  if (pad != 0) {
    Record filler{};
    filler.type = RecordType::kPad;
    filler.length = pad;
    std::memcpy(area_.ring + offset, &filler, sizeof(filler));
    tail_ += pad;
  }
  char* at = area_.ring + (tail_ & (capacity - 1));
  std::memcpy(at, &record, sizeof(record));
  if (payload_bytes != 0) std::memcpy(at + sizeof(record), payload, payload_bytes);
  tail_ += bytes;
  area_.control->tail.store(tail_, std::memory_order_release);
  return true;
}

RingReader::RingReader(const AreaView& area)
    : area_(area),
      head_(area.control->head.load(std::memory_order_relaxed)),
      tail_seen_(head_) {}

const Record* RingReader::Next(bool* corrupt) {
  *corrupt = false;
  const uint64_t capacity = area_.ring_bytes;
  while (true) {
    if (head_ == tail_seen_) {
      tail_seen_ = area_.control->tail.load(std::memory_order_acquire);
      if (head_ == tail_seen_) return nullptr;
    }
    const uint64_t offset = head_ & (capacity - 1);
    const auto* record = reinterpret_cast<const Record*>(area_.ring + offset);
    const uint64_t available = tail_seen_ - head_;
    if (record->type == RecordType::kPad) {
      if (record->length != capacity - offset || record->length > available) {
        *corrupt = true;
        return nullptr;
      }
      head_ += record->length;
      area_.control->head.store(head_, std::memory_order_release);
      continue;
    }
    const uint64_t payload = record->type == RecordType::kEager ? record->length : 0;
    if (payload > capacity / 4 || RecordBytes(payload) > available ||
        RecordBytes(payload) > capacity - offset) {
      *corrupt = true;
      return nullptr;
    }
    return record;
  }
}

void RingReader::Consume(const Record& record) {
  head_ += RecordBytes(record.type == RecordType::kEager ? record.length : 0);
  area_.control->head.store(head_, std::memory_order_release);
}

}  // namespace chorus::shm
