// The match table on its own: (peer, tag) FIFO order, receives posted on several peers,
// arrival order across peers, and the removals a transport makes when a request is cancelled or
// a peer fails. The conformance suite checks the same promises through every transport.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "chorus/core/status.h"
#include "chorus/transport/matching/match_table.h"

namespace chorus::matching {
namespace {

struct Receive {
  int id;
};
struct Message {
  std::string text;
};
using ReceivePtr = std::shared_ptr<Receive>;
using MessagePtr = std::shared_ptr<Message>;
using Table = MatchTable<ReceivePtr, MessagePtr>;

ReceivePtr NewReceive(int id) { return std::make_shared<Receive>(Receive{id}); }
MessagePtr NewMessage(std::string text) { return std::make_shared<Message>(Message{text}); }

int PopPostedId(Table& table, int peer, Tag tag) {
  std::optional<ReceivePtr> receive = table.PopPosted(peer, tag);
  return receive.has_value() ? (*receive)->id : -1;
}

std::string PopText(Table& table, int peer, Tag tag) {
  std::optional<MessagePtr> message = table.PopUnexpected(peer, tag);
  return message.has_value() ? (*message)->text : "<none>";
}

TEST_CASE("receives and messages leave in posting order per (peer, tag), independently") {
  Table table(3);
  table.Post(1, 7, NewReceive(10));
  table.Post(1, 7, NewReceive(11));
  table.Post(1, 8, NewReceive(12));
  table.Post(2, 7, NewReceive(13));
  CHECK(table.PostedCount(1) == 3);
  REQUIRE(table.FrontPosted(1, 7) != nullptr);
  CHECK((*table.FrontPosted(1, 7))->id == 10);
  CHECK(PopPostedId(table, 1, 7) == 10);
  CHECK(PopPostedId(table, 2, 7) == 13);
  CHECK(PopPostedId(table, 1, 8) == 12);
  CHECK(PopPostedId(table, 1, 7) == 11);
  CHECK(PopPostedId(table, 1, 7) == -1);
  CHECK(table.FrontPosted(1, 7) == nullptr);
  CHECK(table.PostedCount(1) == 0);

  table.AddUnexpected(2, 5, NewMessage("a"));
  table.AddUnexpected(1, 5, NewMessage("b"));
  table.AddUnexpected(2, 5, NewMessage("c"));
  table.AddUnexpected(2, 6, NewMessage("d"));
  CHECK(PopText(table, 2, 5) == "a");
  CHECK(PopText(table, 2, 6) == "d");
  CHECK(PopText(table, 2, 5) == "c");
  CHECK(PopText(table, 2, 5) == "<none>");
  CHECK(PopText(table, 1, 5) == "b");
}

TEST_CASE("a receive from any peer takes the message that arrived first among its peers") {
  Table table(4);
  const uint64_t first = table.AddUnexpected(3, 9, NewMessage("from 3"));
  const uint64_t second = table.AddUnexpected(1, 9, NewMessage("from 1"));
  table.AddUnexpected(2, 4, NewMessage("other tag"));
  CHECK(first < second);
  const std::vector<int> peers = {1, 2, 3};
  CHECK(table.OldestUnexpectedAmong(peers, 9) == 3);
  CHECK(PopText(table, 3, 9) == "from 3");
  CHECK(table.OldestUnexpectedAmong(peers, 9) == 1);
  CHECK(PopText(table, 1, 9) == "from 1");
  CHECK(table.OldestUnexpectedAmong(peers, 9) == -1);
  CHECK(table.OldestUnexpectedAmong(peers, 4) == 2);
}

TEST_CASE("a receive posted on several peers is matched once, and leaves every queue") {
  Table table(4);
  const std::vector<int> peers = {1, 2, 3};
  ReceivePtr any = NewReceive(1);
  table.PostOnEach(peers, 9, any);
  table.Post(2, 9, NewReceive(2));  // behind the receive from any peer on rank 2
  CHECK(table.SpreadOver(*any).size() == 3);
  CHECK(PopPostedId(table, 3, 9) == 1);
  CHECK(table.SpreadOver(*any).empty());
  CHECK(table.FrontPosted(1, 9) == nullptr);
  CHECK(PopPostedId(table, 2, 9) == 2);  // the spread receive no longer stands before it
  CHECK(PopPostedId(table, 2, 9) == -1);
}

TEST_CASE("unposting a cancelled receive removes it wherever it was posted") {
  Table table(4);
  ReceivePtr single = NewReceive(1);
  ReceivePtr any = NewReceive(2);
  table.Post(1, 3, single);
  table.PostOnEach(std::vector<int>{1, 2}, 3, any);
  CHECK(table.Unpost(2, 3, *any));  // named through a peer other than the one it is matched on
  CHECK(!table.Unpost(2, 3, *any));
  CHECK(table.PostedCount(1) == 1);
  CHECK(table.PostedCount(2) == 0);
  CHECK(table.Unpost(1, 3, *single));
  CHECK(!table.Unpost(1, 3, *single));
  CHECK(table.PostedCount(1) == 0);
}

TEST_CASE("a failed peer's receives are handed back; a spread one stays on its other peers") {
  Table table(3);
  ReceivePtr single = NewReceive(1);
  ReceivePtr any = NewReceive(2);
  table.Post(1, 5, single);
  table.PostOnEach(std::vector<int>{1, 2}, 6, any);
  auto taken = table.TakePosted(1);
  REQUIRE(taken.size() == 2);
  CHECK(table.PostedCount(1) == 0);
  CHECK(table.PostedCount(2) == 1);
  CHECK(table.SpreadOver(*any).size() == 2);
  // The policy decides the spread receive fails too: it is unposted from the rest.
  CHECK(table.Unpost(1, 6, *any));
  CHECK(table.PostedCount(2) == 0);
}

TEST_CASE("arrived messages can be found, dropped and filtered without disturbing order") {
  Table table(2);
  table.AddUnexpected(1, 1, NewMessage("keep a"));
  const uint64_t drop = table.AddUnexpected(1, 1, NewMessage("drop"));
  table.AddUnexpected(1, 1, NewMessage("keep b"));
  table.AddUnexpected(1, 2, NewMessage("partial"));
  auto* found = table.FindUnexpected(1, 1, [&](const Table::Arrived& a) { return a.arrival == drop; });
  REQUIRE(found != nullptr);
  CHECK(found->message->text == "drop");
  CHECK(table.EraseUnexpected(1, 1, [&](const Table::Arrived& a) { return a.arrival == drop; }));
  CHECK(!table.EraseUnexpected(1, 1, [&](const Table::Arrived& a) { return a.arrival == drop; }));
  table.RetainUnexpected(1, [](const Table::Arrived& a) { return a.message->text != "partial"; });
  CHECK(table.OldestUnexpected(1, 2) == nullptr);
  CHECK(PopText(table, 1, 1) == "keep a");
  CHECK(PopText(table, 1, 1) == "keep b");
  table.AddUnexpected(1, 1, NewMessage("x"));
  table.Post(1, 3, NewReceive(1));
  table.Clear();
  CHECK(table.OldestUnexpected(1, 1) == nullptr);
  CHECK(table.PostedCount(1) == 0);
}

TEST_CASE("a receive from any peer needs distinct other ranks of its mesh") {
  CHECK(CheckAnyPeers(std::vector<int>{1, 2}, 0, 3).ok());
  for (const std::vector<int>& bad : std::vector<std::vector<int>>{{}, {0}, {1, 1}, {3}, {-1}}) {
    const absl::Status status = CheckAnyPeers(bad, 0, 3);
    CHECK(GetErrorKind(status) == ErrorKind::kInvalidArgument);
    CHECK(std::string(status.message()).find("other than itself") != std::string::npos);
  }
}

}  // namespace
}  // namespace chorus::matching
