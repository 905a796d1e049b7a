// The staging transfers of one sender on their own: chunks taken in order into a pulled
// buffer, a matched receive or nowhere, each chunk released to the sender, chunks that
// continue no transfer refused, and failing every transfer.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "chorus/transport/shm/inbound_streams.h"
#include "chorus/transport/shm/layout.h"
#include "chorus/transport/shm/ring.h"
#include "chorus/transport/shm/shm_request.h"
#include "tests/shm/test_area.h"

namespace chorus::shm {
namespace {

using Result = InboundStreams::ChunkResult;
using Into = InboundStreams::Stream::Into;

constexpr Tag kTag = 42;

// The sender's side: writes the chunks of one message into the staging area in turn.
class Sender {
 public:
  Sender(const AreaView& area, uint32_t slot_ref, std::string message)
      : area_(area), slot_ref_(slot_ref), message_(std::move(message)) {}

  // Stages the next chunk and returns the record that announces it.
  Record Next() {
    const uint64_t bytes = std::min<uint64_t>(area_.chunk_bytes(), message_.size() - sent_);
    std::memcpy(area_.chunk(chunks_), message_.data() + sent_, bytes);
    Record record{};
    record.type = RecordType::kChunk;
    record.slot_ref = slot_ref_;
    record.tag = kTag;
    record.length = bytes;
    record.arg = sent_;
    sent_ += bytes;
    ++chunks_;
    return record;
  }
  uint64_t chunks() const { return chunks_; }

 private:
  AreaView area_;
  uint32_t slot_ref_;
  std::string message_;
  uint64_t sent_ = 0;
  uint64_t chunks_ = 0;
};

// A message of `chunks` full chunks and a partial one, every byte telling where it is.
std::string MessageOf(const AreaView& area, uint64_t chunks) {
  std::string message(chunks * area.chunk_bytes() + 100, '\0');
  for (size_t i = 0; i < message.size(); ++i) message[i] = static_cast<char>(i * 7 + i / 4096);
  return message;
}

TEST_CASE("a pull takes its chunks in order into a buffer of its own") {
  TestArea area(4096);
  InboundStreams streams(area.view);
  const uint32_t slot_ref = SlotRef(3, 5);
  const std::string message = MessageOf(area.view, 2);
  streams.StartPull(slot_ref, kTag, message.size());
  Sender sender(area.view, slot_ref, message);

  InboundStreams::Stream finished;
  CHECK(streams.OnChunk(sender.Next(), &finished) == Result::kPartial);
  CHECK(area.view.control->staging_released.load() == 1);
  CHECK(streams.OnChunk(sender.Next(), &finished) == Result::kPartial);
  CHECK(streams.OnChunk(sender.Next(), &finished) == Result::kComplete);
  CHECK(area.view.control->staging_released.load() == sender.chunks());
  CHECK(finished.into == Into::kHeld);
  CHECK(finished.slot_ref == slot_ref);
  CHECK(finished.tag == kTag);
  REQUIRE(finished.held.size == message.size());
  CHECK(std::string(finished.held.data.get(), finished.held.size) == message);
  // The transfer is over: a further chunk for the slot continues nothing.
  CHECK(streams.OnChunk(sender.Next(), &finished) == Result::kInvalid);
}

TEST_CASE("a receive matched mid-pull gets what arrived and then the rest") {
  TestArea area(4096);
  InboundStreams streams(area.view);
  const uint32_t slot_ref = SlotRef(1, 0);
  const std::string message = MessageOf(area.view, 3);
  streams.StartPull(slot_ref, kTag, message.size());
  Sender sender(area.view, slot_ref, message);
  InboundStreams::Stream finished;
  CHECK(streams.OnChunk(sender.Next(), &finished) == Result::kPartial);
  CHECK(streams.OnChunk(sender.Next(), &finished) == Result::kPartial);

  std::vector<char> buffer(message.size());
  auto receive = std::make_shared<ShmRequest>(nullptr, RequestKind::kRecv, 1, kTag,
                                              buffer.data(), buffer.size());
  streams.TakeOver(slot_ref, receive);
  CHECK(streams.OnChunk(sender.Next(), &finished) == Result::kPartial);
  CHECK(streams.OnChunk(sender.Next(), &finished) == Result::kComplete);
  CHECK(finished.into == Into::kRequest);
  CHECK(finished.request == receive);
  CHECK(std::string(buffer.data(), buffer.size()) == message);
}

TEST_CASE("a discarded transfer drains its chunks, releasing each") {
  TestArea area(4096);
  InboundStreams streams(area.view);
  const uint32_t slot_ref = SlotRef(2, 7);
  const std::string message = MessageOf(area.view, 1);
  streams.StartPull(slot_ref, kTag, message.size());
  Sender sender(area.view, slot_ref, message);
  InboundStreams::Stream finished;
  CHECK(streams.OnChunk(sender.Next(), &finished) == Result::kPartial);
  streams.Discard(slot_ref);
  CHECK(streams.OnChunk(sender.Next(), &finished) == Result::kComplete);
  CHECK(finished.into == Into::kDiscard);
  CHECK(finished.held.data == nullptr);
  CHECK(area.view.control->staging_released.load() == 2);
}

TEST_CASE("chunks that continue no transfer are refused and not released") {
  TestArea area(4096);
  InboundStreams streams(area.view);
  const uint32_t slot_ref = SlotRef(4, 1);
  const std::string message = MessageOf(area.view, 2);
  streams.StartPull(slot_ref, kTag, message.size());
  Sender sender(area.view, slot_ref, message);
  InboundStreams::Stream finished;
  const Record first = sender.Next();

  Record other_slot = first;
  other_slot.slot_ref = SlotRef(4, 2);
  CHECK(streams.OnChunk(other_slot, &finished) == Result::kInvalid);
  Record earlier_use = first;
  earlier_use.slot_ref = SlotRef(3, 1);
  CHECK(streams.OnChunk(earlier_use, &finished) == Result::kInvalid);
  Record out_of_order = first;
  out_of_order.arg = area.view.chunk_bytes();
  CHECK(streams.OnChunk(out_of_order, &finished) == Result::kInvalid);
  Record empty = first;
  empty.length = 0;
  CHECK(streams.OnChunk(empty, &finished) == Result::kInvalid);
  Record too_long = first;
  too_long.length = area.view.chunk_bytes() + 1;
  CHECK(streams.OnChunk(too_long, &finished) == Result::kInvalid);
  CHECK(area.view.control->staging_released.load() == 0);

  CHECK(streams.OnChunk(first, &finished) == Result::kPartial);
  CHECK(area.view.control->staging_released.load() == 1);
}

TEST_CASE("failing the transfers fails each receive and drops them all") {
  TestArea area(4096);
  InboundStreams streams(area.view);
  const std::string message = MessageOf(area.view, 1);
  std::vector<char> buffer(message.size());
  auto receive = std::make_shared<ShmRequest>(nullptr, RequestKind::kRecv, 1, kTag,
                                              buffer.data(), buffer.size());
  streams.StartInto(SlotRef(1, 3), receive, kTag, message.size());
  streams.StartPull(SlotRef(1, 4), kTag, message.size());
  std::vector<ShmRequest*> failed;
  streams.FailAll([&](ShmRequest& request) { failed.push_back(&request); });
  CHECK(failed == std::vector<ShmRequest*>{receive.get()});
  Sender sender(area.view, SlotRef(1, 3), message);
  InboundStreams::Stream finished;
  CHECK(streams.OnChunk(sender.Next(), &finished) == Result::kInvalid);
}

}  // namespace
}  // namespace chorus::shm
