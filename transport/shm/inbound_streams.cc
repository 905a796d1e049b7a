#include "chorus/transport/shm/inbound_streams.h"

#include <cstring>
#include <utility>

#include "chorus/transport/shm/shm_request.h"

namespace chorus::shm {

void InboundStreams::StartInto(uint32_t slot_ref, std::shared_ptr<ShmRequest> request, Tag tag,
                               uint64_t length) {
  Stream& stream = streams_[SlotIndex(slot_ref)];
  stream = Stream{};
  stream.request = std::move(request);
  stream.tag = tag;
  stream.slot_ref = slot_ref;
  stream.length = length;
}

void InboundStreams::StartPull(uint32_t slot_ref, Tag tag, uint64_t length) {
  Stream& stream = streams_[SlotIndex(slot_ref)];
  stream = Stream{};
  stream.into = Stream::Into::kHeld;
  stream.held = Bytes::Uninitialized(length);
  stream.tag = tag;
  stream.slot_ref = slot_ref;
  stream.length = length;
}

void InboundStreams::TakeOver(uint32_t slot_ref, std::shared_ptr<ShmRequest> request) {
  Stream& stream = streams_[SlotIndex(slot_ref)];
  if (stream.received != 0) request->Store(0, stream.held.data.get(), stream.received);
  stream.held = {};
  stream.into = Stream::Into::kRequest;
  stream.request = std::move(request);
}

void InboundStreams::Discard(uint32_t slot_ref) {
  Stream& stream = streams_[SlotIndex(slot_ref)];
  stream.into = Stream::Into::kDiscard;
  stream.request.reset();
  stream.held = {};
}

InboundStreams::ChunkResult InboundStreams::OnChunk(const Record& record, Stream* finished) {
  auto it = streams_.find(SlotIndex(record.slot_ref));
  if (it == streams_.end() || it->second.slot_ref != record.slot_ref ||
      record.arg != it->second.received || record.length == 0 ||
      record.length > area_.chunk_bytes() ||
      record.length > it->second.length - it->second.received) {
    return ChunkResult::kInvalid;
  }
  Stream& stream = it->second;
  const char* chunk = area_.chunk(chunks_consumed_);
  if (stream.into == Stream::Into::kRequest) {
    stream.request->Store(record.arg, chunk, record.length);
  } else if (stream.into == Stream::Into::kHeld) {
    std::memcpy(stream.held.data.get() + record.arg, chunk, record.length);
  }
  ++chunks_consumed_;
  area_.control->staging_released.store(chunks_consumed_, std::memory_order_release);
  stream.received += record.length;
  if (stream.received < stream.length) return ChunkResult::kPartial;
  *finished = std::move(stream);
  streams_.erase(it);
  return ChunkResult::kComplete;
}

}  // namespace chorus::shm
