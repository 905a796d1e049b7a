// One behavioural contract (rendezvous/store.h), checked against every store.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "tests/rendezvous/store_fixtures.h"

namespace chorus::testing {
namespace {

using std::chrono::steady_clock;

// A deadline for calls that are expected to succeed: generous for a loaded 2-core machine.
Deadline Generous() { return Deadline::After(absl::Seconds(20)); }

double SecondsSince(steady_clock::time_point start) {
  return std::chrono::duration<double>(steady_clock::now() - start).count();
}

#define STORE_FIXTURES \
  MemoryStoreFixture, FileStoreFixture, PrefixStoreFixture, RedisStoreFixture, TcpStoreFixture, \
      SecureTcpStoreFixture

TEMPLATE_TEST_CASE("set, get and overwrite", "[conformance]", STORE_FIXTURES) {
  TestType fixture;
  Store& store = fixture.store();
  INFO(TestType::kName);
  REQUIRE(store.Set("alpha", "one").ok());
  CHECK(store.Get("alpha", Generous()).value() == "one");
  REQUIRE(store.Set("alpha", "two, longer than one").ok());
  CHECK(store.Get("alpha", Generous()).value() == "two, longer than one");
  REQUIRE(store.Set("alpha", "").ok());
  CHECK(store.Get("alpha", Generous()).value().empty());
  REQUIRE(store.Set("dir/like/key", "slashes").ok());
  CHECK(store.Get("dir/like/key", Generous()).value() == "slashes");
  CHECK(store.TryGet("dir").value() == std::nullopt);
}

TEMPLATE_TEST_CASE("get waits until another thread sets the key", "[conformance]", STORE_FIXTURES) {
  TestType fixture;
  Store& store = fixture.store();
  INFO(TestType::kName);
  absl::Status set_status;  // Catch2 assertions are not thread-safe: check after the join
  std::thread setter([&store, &set_status] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    set_status = store.Set("late", "arrived");
  });
  const auto value = store.Get("late", Generous());
  setter.join();
  CHECK(set_status.ok());
  REQUIRE(value.ok());
  CHECK(*value == "arrived");
}

TEMPLATE_TEST_CASE("get times out naming the key, within the deadline", "[conformance]",
                   STORE_FIXTURES) {
  TestType fixture;
  Store& store = fixture.store();
  INFO(TestType::kName);
  const auto start = steady_clock::now();
  const auto value = store.Get("never-set-key", Deadline::AfterMillis(200));
  const double elapsed = SecondsSince(start);
  REQUIRE_FALSE(value.ok());
  CHECK(GetErrorKind(value.status()) == ErrorKind::kDeadlineExceeded);
  CHECK(absl::StrContains(value.status().message(), "never-set-key"));
  CHECK(elapsed >= 0.19);
  CHECK(elapsed < 0.2 + 1.0);  // deadline plus a margin for a loaded machine
}

TEMPLATE_TEST_CASE("try-get never waits", "[conformance]", STORE_FIXTURES) {
  TestType fixture;
  Store& store = fixture.store();
  INFO(TestType::kName);
  const auto start = steady_clock::now();
  CHECK(store.TryGet("absent").value() == std::nullopt);
  CHECK(SecondsSince(start) < 1.0);
  REQUIRE(store.Set("present", "here").ok());
  CHECK(store.TryGet("present").value() == std::optional<std::string>("here"));
}

TEMPLATE_TEST_CASE("add from many threads is exact", "[conformance]", STORE_FIXTURES) {
  TestType fixture;
  Store& store = fixture.store();
  INFO(TestType::kName);
  constexpr int kThreads = 8;
  constexpr int kAddsPerThread = 100;
  std::vector<std::vector<int64_t>> returned(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&store, &returned, t] {
      for (int i = 0; i < kAddsPerThread; ++i) {
        const auto value = store.Add("counter", 1);
        if (value.ok()) returned[t].push_back(*value);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  // Every add saw a distinct intermediate value: no two read the same old value.
  std::set<int64_t> distinct;
  for (const auto& values : returned) distinct.insert(values.begin(), values.end());
  CHECK(distinct.size() == kThreads * kAddsPerThread);
  CHECK(*distinct.begin() == 1);
  CHECK(*distinct.rbegin() == kThreads * kAddsPerThread);
  CHECK(store.Add("counter", -kThreads * kAddsPerThread).value() == 0);
  CHECK(store.Add("fresh", -5).value() == -5);
  CHECK(store.Get("fresh", Generous()).value() == "-5");
  REQUIRE(store.Set("text", "not a number").ok());
  const auto bad = store.Add("text", 1);
  REQUIRE_FALSE(bad.ok());
  CHECK(GetErrorKind(bad.status()) == ErrorKind::kInvalidArgument);
  CHECK(absl::StrContains(bad.status().message(), "text"));
}

TEMPLATE_TEST_CASE("multi-set and multi-get keep order", "[conformance]", STORE_FIXTURES) {
  TestType fixture;
  Store& store = fixture.store();
  INFO(TestType::kName);
  const std::vector<KeyValue> pairs = {{"z", "last"}, {"a", "first"}, {"m", "middle"}};
  REQUIRE(store.MultiSet(pairs).ok());
  const std::vector<std::string> keys = {"m", "z", "a", "m"};
  const auto values = store.MultiGet(keys, Generous());
  REQUIRE(values.ok());
  CHECK(*values == std::vector<std::string>{"middle", "last", "first", "middle"});
  CHECK(store.MultiGet({}, Generous()).value().empty());
}

TEMPLATE_TEST_CASE("wait returns when all keys exist and names only the missing ones",
                   "[conformance]", STORE_FIXTURES) {
  TestType fixture;
  Store& store = fixture.store();
  INFO(TestType::kName);
  REQUIRE(store.Set("ready-1", "x").ok());
  absl::Status set_status;
  std::thread setter([&store, &set_status] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    set_status = store.Set("ready-2", "y");
  });
  const absl::Status wait_status = store.Wait({"ready-1", "ready-2"}, Generous());
  setter.join();
  CHECK(set_status.ok());
  CHECK(wait_status.ok());
  const auto start = steady_clock::now();
  const absl::Status status =
      store.Wait({"ready-1", "missing-a", "missing-b"}, Deadline::AfterMillis(100));
  CHECK(SecondsSince(start) < 0.1 + 1.0);
  CHECK(GetErrorKind(status) == ErrorKind::kDeadlineExceeded);
  CHECK(absl::StrContains(status.message(), "missing-a"));
  CHECK(absl::StrContains(status.message(), "missing-b"));
  CHECK_FALSE(absl::StrContains(status.message(), "ready-1"));
}

TEMPLATE_TEST_CASE("delete removes a key; deleting an absent key is fine", "[conformance]",
                   STORE_FIXTURES) {
  TestType fixture;
  Store& store = fixture.store();
  INFO(TestType::kName);
  REQUIRE(store.Set("doomed", "v").ok());
  REQUIRE(store.Delete("doomed").ok());
  CHECK(store.TryGet("doomed").value() == std::nullopt);
  CHECK(GetErrorKind(store.Get("doomed", Deadline::AfterMillis(20)).status()) ==
        ErrorKind::kDeadlineExceeded);
  CHECK(store.Delete("doomed").ok());
  CHECK(store.Delete("never-existed").ok());
  REQUIRE(store.Set("doomed", "reborn").ok());
  CHECK(store.Get("doomed", Generous()).value() == "reborn");
}

TEMPLATE_TEST_CASE("binary keys and values, NUL bytes and 1 MiB values", "[conformance]",
                   STORE_FIXTURES) {
  TestType fixture;
  Store& store = fixture.store();
  INFO(TestType::kName);
  const std::string binary_key("k\0e\xffy/..", 9);
  const std::string binary_value("\0\x01\x02\0\xfe\xff", 6);
  REQUIRE(store.Set(binary_key, binary_value).ok());
  CHECK(store.Get(binary_key, Generous()).value() == binary_value);
  CHECK(store.TryGet(std::string("k\0e", 3)).value() == std::nullopt);  // no truncation at NUL
  std::string large(1 << 20, '\0');
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<char>((i * 7919) >> 3);
  REQUIRE(store.Set("large", large).ok());
  const auto read = store.Get("large", Generous());
  REQUIRE(read.ok());
  CHECK(read->size() == large.size());
  CHECK(*read == large);
}

TEMPLATE_TEST_CASE("many keys", "[conformance]", STORE_FIXTURES) {
  TestType fixture;
  Store& store = fixture.store();
  INFO(TestType::kName);
  constexpr int kKeys = 2000;
  std::vector<KeyValue> pairs;
  std::vector<std::string> keys;
  for (int i = 0; i < kKeys; ++i) {
    pairs.emplace_back(absl::StrCat("many/", i), absl::StrCat("value-", i * 3));
    keys.push_back(pairs.back().first);
  }
  REQUIRE(store.MultiSet(pairs).ok());
  const auto values = store.MultiGet(keys, Generous());
  REQUIRE(values.ok());
  REQUIRE(values->size() == kKeys);
  int wrong = 0;
  for (int i = 0; i < kKeys; ++i) wrong += (*values)[i] != pairs[i].second;
  CHECK(wrong == 0);
}

TEST_CASE("prefix stores over one store do not see each other's keys") {
  MemoryStore inner;
  PrefixStore first("job-a", inner);
  PrefixStore second("job-b", inner);
  REQUIRE(first.Set("rank/0", "a0").ok());
  REQUIRE(second.Set("rank/0", "b0").ok());
  CHECK(first.Get("rank/0", Generous()).value() == "a0");
  CHECK(second.Get("rank/0", Generous()).value() == "b0");
  CHECK(inner.TryGet("job-a/rank/0").value() == std::optional<std::string>("a0"));
  REQUIRE(first.Set("only-a", "x").ok());
  CHECK(second.TryGet("only-a").value() == std::nullopt);
  CHECK(first.Add("n", 2).value() == 2);
  CHECK(second.Add("n", 5).value() == 5);
  REQUIRE(first.Delete("rank/0").ok());
  CHECK(second.TryGet("rank/0").value() == std::optional<std::string>("b0"));
  const absl::Status timeout = second.Wait({"only-a"}, Deadline::AfterMillis(20));
  CHECK(absl::StrContains(timeout.message(), "job-b/only-a"));
  CHECK(absl::StrContains(second.Describe(), "job-b/"));
}

TEST_CASE("an owning prefix store keeps its inner store alive") {
  auto owning = std::make_unique<PrefixStore>("outer", std::make_unique<MemoryStore>());
  REQUIRE(owning->Set("k", "v").ok());
  CHECK(owning->Get("k", Generous()).value() == "v");
  CHECK(owning->key_prefix() == "outer/");
}

}  // namespace
}  // namespace chorus::testing
