// The verbs transport's pure parts, without a device: the published address codec, slot
// header checks, immediates and the credit window.
#include "chorus/transport/ibverbs/wire.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <deque>
#include <random>
#include <vector>

#include "chorus/core/status.h"
#include "chorus/transport/ibverbs/credit_window.h"

namespace chorus::ibverbs {
namespace {

PublishedAddress SampleAddress() {
  PublishedAddress address;
  for (size_t i = 0; i < address.gid.size(); ++i) address.gid[i] = static_cast<uint8_t>(i * 7);
  address.lid = 0x1234;
  address.link_layer = 2;
  address.mtu_bytes = 1024;
  address.psn = 0xabcdef;
  address.mesh_id = 0x0123456789abcdefull;
  address.slots = 32;
  address.slot_bytes = 8192;
  address.read_depth = 16;
  address.device = "rxe1 port 1";
  address.host = "4f1c2a/4026531836";
  address.pid = 4242;
  address.endpoints.resize(3);
  address.endpoints[0] = {0x11, 0x7f0000001000ull, 0xdeadbeef};
  address.endpoints[2] = {0x13, 0x7f0000009000ull, 0x12345678};
  return address;
}

TEST_CASE("a published address reads back as it was written", "[wire]") {
  const PublishedAddress address = SampleAddress();
  const absl::StatusOr<PublishedAddress> parsed =
      ParsePublishedAddress(FormatPublishedAddress(address));
  REQUIRE(parsed.ok());
  CHECK(parsed->gid == address.gid);
  CHECK(parsed->lid == address.lid);
  CHECK(parsed->link_layer == address.link_layer);
  CHECK(parsed->mtu_bytes == address.mtu_bytes);
  CHECK(parsed->psn == address.psn);
  CHECK(parsed->mesh_id == address.mesh_id);
  CHECK(parsed->slots == address.slots);
  CHECK(parsed->slot_bytes == address.slot_bytes);
  CHECK(parsed->read_depth == address.read_depth);
  CHECK(parsed->device == address.device);
  CHECK(parsed->host == address.host);
  CHECK(parsed->pid == address.pid);
  REQUIRE(parsed->endpoints.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(parsed->endpoints[i].qp_num == address.endpoints[i].qp_num);
    CHECK(parsed->endpoints[i].ring_address == address.endpoints[i].ring_address);
    CHECK(parsed->endpoints[i].ring_rkey == address.endpoints[i].ring_rkey);
  }
}

TEST_CASE("anything but a whole published address is refused", "[wire]") {
  const std::string text = FormatPublishedAddress(SampleAddress());
  for (const std::string& bad :
       {std::string(""), std::string("tcp:127.0.0.1:5000"), text.substr(0, text.size() - 2),
        text + "00", text.substr(0, 20) + "zz" + text.substr(22), std::string("ibverbs1:0")}) {
    INFO(bad);
    const absl::StatusOr<PublishedAddress> parsed = ParsePublishedAddress(bad);
    CHECK(GetErrorKind(parsed.status()) == ErrorKind::kInvalidArgument);
  }
}

TEST_CASE("a GID prints as an IPv6 address", "[wire]") {
  std::array<uint8_t, 16> gid{};
  gid[10] = 0xff;
  gid[11] = 0xff;
  gid[12] = 10;
  gid[13] = 11;
  gid[14] = 0;
  gid[15] = 2;
  CHECK(GidToString(gid) == "::ffff:10.11.0.2");
}

TEST_CASE("immediates carry a kind and a 30-bit value", "[wire]") {
  for (ImmediateKind kind : {ImmediateKind::kSlot, ImmediateKind::kCredits}) {
    for (uint32_t value : {0u, 1u, 4095u, kImmediateValueMask}) {
      const uint32_t immediate = MakeImmediate(kind, value);
      CHECK(ImmediateKindOf(immediate) == kind);
      CHECK(ImmediateValue(immediate) == value);
    }
  }
  // Counts wrap at 2^30.
  CHECK(ImmediateValue(MakeImmediate(ImmediateKind::kCredits, (1u << 30) + 5)) == 5);
}

TEST_CASE("slot headers are checked against the slot and the message", "[wire]") {
  constexpr size_t kSlot = 8192;
  SlotHeader header;
  header.kind = SlotKind::kData;
  header.message_bytes = 20000;
  header.offset = 8128;
  header.fragment_bytes = kSlot - kSlotHeaderBytes;
  CHECK(SlotHeaderValid(header, kSlot));
  header.fragment_bytes = kSlot - kSlotHeaderBytes + 1;  // past the slot
  CHECK_FALSE(SlotHeaderValid(header, kSlot));
  header.offset = 19000;
  header.fragment_bytes = 1001;  // past the message
  CHECK_FALSE(SlotHeaderValid(header, kSlot));
  header.fragment_bytes = 1000;
  CHECK(SlotHeaderValid(header, kSlot));
  header.offset = 20001;
  header.fragment_bytes = 0;
  CHECK_FALSE(SlotHeaderValid(header, kSlot));
  header.kind = SlotKind::kAnnounce;
  CHECK(SlotHeaderValid(header, kSlot));
  uint8_t raw[sizeof(SlotHeader)] = {};
  raw[0] = 9;  // no such kind
  std::memcpy(&header, raw, sizeof(raw));
  CHECK_FALSE(SlotHeaderValid(header, kSlot));
}

TEST_CASE("the credit window stops a sender at the receiver's slots", "[credits]") {
  CreditWindow sender(4);
  for (uint32_t i = 0; i < 4; ++i) {
    REQUIRE(sender.CanSend());
    CHECK(sender.NextSlot() == i);
    sender.Sent();
  }
  CHECK_FALSE(sender.CanSend());
  CHECK(sender.InFlight() == 4);
  CHECK(sender.Returned(2));
  CHECK(sender.InFlight() == 2);
  CHECK(sender.NextSlot() == 0);  // slots are written in turn
  // A report never goes backwards, and never claims more than was sent.
  CHECK(sender.Returned(2));
  CHECK(sender.InFlight() == 2);
  CHECK_FALSE(sender.Returned(5));
  CHECK(sender.InFlight() == 2);
  CHECK(sender.Returned(4));
  CHECK(sender.InFlight() == 0);
}

TEST_CASE("the receiver reports freed slots once half the window is owed", "[credits]") {
  CreditWindow receiver(8);
  for (int i = 0; i < 3; ++i) {
    CHECK(receiver.NextArrivalSlot() == static_cast<uint32_t>(i));
    receiver.Freed();
    CHECK_FALSE(receiver.OwesReport());
  }
  CHECK(receiver.AnythingUnreported());
  receiver.Freed();
  CHECK(receiver.OwesReport());
  CHECK(receiver.FreedCount() == 4);
  receiver.Reported();
  CHECK_FALSE(receiver.OwesReport());
  CHECK_FALSE(receiver.AnythingUnreported());
}

// A sender and a slow receiver joined by the window alone, under random schedules: the sender
// never writes a slot the receiver has not freed, messages are taken in order, and every message
// gets through even when nothing goes back to carry the receiver's reports (the report sent
// alone once half the window is owed is then what keeps the sender going).
void SimulateSlowReceiver(uint32_t slots, double piggyback_chance, uint32_t seed) {
  constexpr int kMessages = 5000;
  std::mt19937 random(seed);
  std::uniform_real_distribution<double> chance(0.0, 1.0);
  CreditWindow sender(slots);
  CreditWindow receiver(slots);
  std::vector<int> ring(slots, -1);  // the receiver's slots: which message each holds
  std::deque<uint32_t> reports;      // freed counts on their way back, in order
  int next_to_send = 0;
  int next_to_take = 0;
  long steps = 0;
  while (next_to_take < kMessages && steps < 200L * kMessages) {
    ++steps;
    const double roll = chance(random);
    if (roll < 0.5) {
      if (next_to_send < kMessages && sender.CanSend()) {
        const uint32_t slot = sender.NextSlot();
        REQUIRE(ring[slot] == -1);  // never overrun
        ring[slot] = next_to_send++;
        sender.Sent();
        REQUIRE(sender.InFlight() <= slots);
      }
    } else if (roll < 0.6) {  // the receiver is five times slower than the sender
      const uint32_t slot = receiver.NextArrivalSlot();
      if (ring[slot] != -1) {
        REQUIRE(ring[slot] == next_to_take);  // in order
        ring[slot] = -1;
        ++next_to_take;
        receiver.Freed();
      }
    } else if (roll < 0.8) {
      // Something goes back (a reply of the receiver's own carries the count), or the count
      // goes alone because half the window is owed.
      const bool reply = chance(random) < piggyback_chance && receiver.AnythingUnreported();
      if (reply || receiver.OwesReport()) {
        reports.push_back(receiver.FreedCount());
        receiver.Reported();
      }
    } else if (!reports.empty()) {
      REQUIRE(sender.Returned(reports.front()));
      reports.pop_front();
    }
  }
  INFO(slots << " slots, piggyback chance " << piggyback_chance << ", seed " << seed << ": "
             << next_to_take << " of " << kMessages << " messages taken in " << steps << " steps");
  CHECK(next_to_take == kMessages);
}

TEST_CASE("a slow receiver never lets the sender overrun a slot, and never stalls it",
          "[credits]") {
  for (uint32_t slots : {1u, 2u, 3u, 32u}) {
    for (double piggyback : {0.0, 0.3, 1.0}) {
      for (uint32_t seed = 1; seed <= 3; ++seed) SimulateSlowReceiver(slots, piggyback, seed);
    }
  }
}

}  // namespace
}  // namespace chorus::ibverbs
