// A match table's per-tag FIFO: order kept through its compactions, removals from the
// middle, and move-only entries.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <vector>

#include "chorus/transport/matching/tag_queue.h"

namespace chorus::matching {
namespace {

std::vector<int> Contents(TagQueue<int>& queue) { return {queue.begin(), queue.end()}; }

TEST_CASE("a tag queue hands entries out in order, however deep and however interleaved") {
  TagQueue<int> queue;
  CHECK(queue.empty());
  int next_in = 0;
  int next_out = 0;
  // Push 3, take 2, many times: the taken prefix is compacted away along the way.
  for (int round = 0; round < 5000; ++round) {
    for (int i = 0; i < 3; ++i) queue.push_back(next_in++);
    for (int i = 0; i < 2; ++i) REQUIRE(queue.pop_front() == next_out++);
  }
  const std::vector<int> left = Contents(queue);
  REQUIRE(left.size() == 5000);
  CHECK(left.front() == next_out);
  CHECK(std::is_sorted(left.begin(), left.end()));
  while (!queue.empty()) REQUIRE(queue.pop_front() == next_out++);
  CHECK(next_out == next_in);
}

TEST_CASE("a tag queue removes entries from the middle and keeps the rest in order") {
  TagQueue<int> queue;
  for (int i = 0; i < 40; ++i) queue.push_back(i);
  for (int i = 0; i < 20; ++i) queue.pop_front();  // compacted: 20 of 40 taken
  queue.erase(std::find(queue.begin(), queue.end(), 25));
  queue.erase(std::remove_if(queue.begin(), queue.end(), [](int v) { return v % 2 == 0; }),
              queue.end());
  CHECK(Contents(queue) == std::vector<int>{21, 23, 27, 29, 31, 33, 35, 37, 39});
  CHECK(queue.front() == 21);
  queue.erase(queue.begin(), queue.end());
  CHECK(queue.empty());
  queue.push_back(7);
  CHECK(queue.pop_front() == 7);
}

TEST_CASE("a tag queue holds move-only entries") {
  TagQueue<std::unique_ptr<int>> queue;
  for (int i = 0; i < 100; ++i) queue.push_back(std::make_unique<int>(i));
  for (int i = 0; i < 100; ++i) REQUIRE(*queue.pop_front() == i);
  CHECK(queue.empty());
}

}  // namespace
}  // namespace chorus::matching
