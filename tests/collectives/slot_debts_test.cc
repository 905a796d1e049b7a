// SlotDebts (collectives/engine/slot_debts.h) over slots in this process's memory: reads owed
// are paid once the slot holds what was owed and forgotten once it has moved past; a checked
// read compares the slot's header, keeps the first disagreement for every later Settle, and,
// where the slot moved past what was owed, looks for the peer's header sent as a message first.
#include "chorus/collectives/engine/slot_debts.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "chorus/collectives/engine/header.h"
#include "chorus/collectives/engine/tag.h"

namespace chorus::testing {
namespace {

constexpr uint16_t kCommunicator = 7;
constexpr int kPeer = 1;

// Two ranks' slots in plain memory, and the header messages "waiting" from peers.
class MemorySlots : public SharedSlots {
 public:
  MemorySlots() : slots_(new SharedSlot[2 * kDepth]()) {}

  absl::Status AttachAll() override { return absl::OkStatus(); }
  SharedSlot* Slot(int rank, int index) override {
    ++looks_;
    return &slots_[rank * kDepth + index];
  }
  uint8_t* Buffer(int) override { return nullptr; }
  absl::Status PeerStatus(int) override { return absl::OkStatus(); }
  bool MessageWaiting(int rank, Tag tag) override { return waiting_.count({rank, tag}) > 0; }
  bool oversubscribed() const override { return false; }

  // `rank` publishes `header` in the slot of its call numbered header.sequence.
  void Publish(int rank, const CollectiveHeader& header) {
    SharedSlot& slot = *Slot(rank, static_cast<int>(header.sequence % kDepth));
    const CollectiveHeader::Wire wire = header.Encode();
    std::memcpy(slot.data, wire.data(), wire.size());
    slot.bytes = static_cast<uint32_t>(wire.size());
    slot.readers = 1;
    slot.read.store(0);
    slot.stamp.store(Stamp(header.sequence));
  }
  void SendHeaderMessage(int rank, uint32_t sequence) { waiting_.insert({rank, Stamp(sequence)}); }
  // How many times a slot was looked up since the last call.
  int TakeLooks() { return std::exchange(looks_, 0); }

  static uint64_t Stamp(uint32_t sequence) {
    return CollectiveTag(kCommunicator, sequence, kHeaderStep);
  }

 private:
  std::unique_ptr<SharedSlot[]> slots_;
  std::set<std::pair<int, Tag>> waiting_;
  int looks_ = 0;
};

CollectiveHeader Broadcast(uint32_t sequence, int root) {
  CollectiveHeader header;
  header.kind = CollectiveKind::kBroadcast;
  header.type = DataType::kFloat32;
  header.algorithm = AlgorithmId::kSharedSlots;
  header.root = root;
  header.sequence = sequence;
  header.ranks = 2;
  header.count = 1;
  return header;
}

void OweCheckOf(SlotDebts& debts, uint32_t sequence, const CollectiveHeader& mine) {
  debts.OweCheck(kPeer, static_cast<int>(sequence % SharedSlots::kDepth),
                 MemorySlots::Stamp(sequence), mine.Encode());
}

// One rank's debts to peer kPeer's slots.
struct Debts {
  MemorySlots slots;
  SlotDebts debts;

  // Settle reports nothing and pays the one read owed of slot `sequence`'s contents.
  void ExpectPaid(uint32_t sequence) {
    CHECK_FALSE(debts.Settle(slots).has_value());
    CHECK(debts.owed() == 0);
    CHECK(slots.Slot(kPeer, static_cast<int>(sequence % SharedSlots::kDepth))->read.load() == 1);
  }
};

TEST_CASE_METHOD(Debts, "a read owed is paid once the slot holds what was owed") {
  debts.Owe(kPeer, 3, MemorySlots::Stamp(3));
  CHECK_FALSE(debts.Settle(slots).has_value());
  CHECK(debts.owed() == 1);  // not written yet
  slots.Publish(kPeer, Broadcast(3, 0));
  ExpectPaid(3);
}

TEST_CASE_METHOD(Debts,
                 "debts to a peer behind the oldest one are not looked at until it is paid") {
  // A root running ahead owes its predecessor a check for each call; only the oldest one can
  // be payable before the rest.
  constexpr uint32_t kOwed = SharedSlots::kDepth - 1;
  for (uint32_t sequence = 0; sequence < kOwed; ++sequence) {
    OweCheckOf(debts, sequence, Broadcast(sequence, 0));
  }
  slots.TakeLooks();
  CHECK_FALSE(debts.Settle(slots).has_value());
  CHECK(slots.TakeLooks() == 1);
  CHECK(debts.owed() == kOwed);
  for (uint32_t sequence = 0; sequence < 3; ++sequence) {
    slots.Publish(kPeer, Broadcast(sequence, 0));
  }
  slots.TakeLooks();
  CHECK_FALSE(debts.Settle(slots).has_value());
  CHECK(slots.TakeLooks() == 4);  // the three paid and the next
  CHECK(debts.owed() == kOwed - 3);
  for (uint32_t sequence = 3; sequence < kOwed; ++sequence) {
    slots.Publish(kPeer, Broadcast(sequence, 0));
  }
  CHECK_FALSE(debts.Settle(slots).has_value());
  CHECK(debts.owed() == 0);
}

TEST_CASE_METHOD(Debts, "a checked read whose header agrees is paid and reports nothing") {
  OweCheckOf(debts, 2, Broadcast(2, 0));
  slots.Publish(kPeer, Broadcast(2, 0));
  ExpectPaid(2);
}

TEST_CASE_METHOD(Debts, "a checked read whose header disagrees is kept for every later Settle") {
  OweCheckOf(debts, 2, Broadcast(2, 0));
  slots.Publish(kPeer, Broadcast(2, 1));
  for (int settle = 0; settle < 3; ++settle) {
    const std::optional<SlotDisagreement> found = debts.Settle(slots);
    REQUIRE(found.has_value());
    CHECK(found->peer == kPeer);
    CHECK_FALSE(found->over_messages);
    const absl::StatusOr<CollectiveHeader> theirs =
        CollectiveHeader::Decode(found->theirs.data(), found->theirs_bytes);
    REQUIRE(theirs.ok());
    CHECK(theirs->root == 1);
    CHECK(Broadcast(2, 0).Differences(*theirs) == "root 0 vs 1");
  }
  // The read is still counted, so the peer's slot is not stuck.
  CHECK(slots.Slot(kPeer, 2)->read.load() == 1);
  CHECK(debts.owed() == 0);
}

TEST_CASE_METHOD(Debts,
                 "a checked read of a peer that sent its header as a message is a disagreement") {
  OweCheckOf(debts, 5, Broadcast(5, 0));
  CHECK_FALSE(debts.Probe(slots).has_value());
  slots.SendHeaderMessage(kPeer, 5);
  const std::optional<SlotDisagreement> found = debts.Probe(slots);
  REQUIRE(found.has_value());
  CHECK(found->over_messages);
  CHECK(debts.Settle(slots).has_value());  // kept
}

TEST_CASE_METHOD(Debts,
                 "a checked read whose slot moved past it looks for a header message first") {
  SECTION("the peer ran the call over messages: a disagreement") {
    OweCheckOf(debts, 1, Broadcast(1, 0));
    slots.SendHeaderMessage(kPeer, 1);
    slots.Publish(kPeer, Broadcast(1 + SharedSlots::kDepth, 0));  // the same slot, later
    const std::optional<SlotDisagreement> found = debts.Settle(slots);
    REQUIRE(found.has_value());
    CHECK(found->over_messages);
    CHECK(debts.owed() == 0);
  }
  SECTION("the peer's call ended before it published: forgotten") {
    OweCheckOf(debts, 1, Broadcast(1, 0));
    slots.Publish(kPeer, Broadcast(1 + SharedSlots::kDepth, 0));
    CHECK_FALSE(debts.Settle(slots).has_value());
    CHECK(debts.owed() == 0);
    CHECK(slots.Slot(kPeer, 1)->read.load() == 0);  // not its contents: not counted
  }
}

}  // namespace
}  // namespace chorus::testing
