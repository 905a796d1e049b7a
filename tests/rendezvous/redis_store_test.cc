// Redis-store failure behaviour against a real redis-server: the server dying under a wait,
// absent at start, hung, restarted, and AUTH.
#include "chorus/rendezvous/redis_store.h"

#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "tests/harness/multirank.h"
#include "tests/harness/redis_server.h"

namespace chorus::testing {
namespace {

using std::chrono::steady_clock;

double SecondsSince(steady_clock::time_point start) {
  return std::chrono::duration<double>(steady_clock::now() - start).count();
}

std::unique_ptr<RedisServer> StartServer(RedisServerOptions options = {}) {
  auto server = RedisServer::Start(std::move(options));
  if (!server.ok()) FAIL(server.status().ToString());
  return *std::move(server);
}

RedisStoreOptions OptionsFor(const RedisServer& server) {
  RedisStoreOptions options;
  options.host = server.host();
  options.port = server.port();
  return options;
}

std::unique_ptr<RedisStore> ConnectOrFail(const RedisStoreOptions& options) {
  auto store = RedisStore::Connect(options);
  if (!store.ok()) FAIL(store.status().ToString());
  return *std::move(store);
}

bool IsPeerUnavailableOrDeadline(const absl::Status& status) {
  const ErrorKind kind = GetErrorKind(status);
  return kind == ErrorKind::kPeerUnavailable || kind == ErrorKind::kDeadlineExceeded;
}

TEST_CASE("waits fail promptly and clearly when the server stops under them") {
  auto server = StartServer();
  auto store = ConnectOrFail(OptionsFor(*server));
  const std::string address = absl::StrCat("127.0.0.1:", server->port());
  constexpr double kDeadlineSeconds = 4;
  absl::Status get_status;
  absl::Status wait_status;
  double get_seconds = 0;
  double wait_seconds = 0;
  const Deadline deadline = Deadline::After(absl::Seconds(kDeadlineSeconds));
  const auto start = steady_clock::now();
  std::thread getter([&] {
    get_status = store->Get("never-set", deadline).status();
    get_seconds = SecondsSince(start);
  });
  std::thread waiter([&] {
    wait_status = store->Wait({"also-never-set"}, deadline);
    wait_seconds = SecondsSince(start);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  server->Stop();
  getter.join();
  waiter.join();
  for (const auto& [status, seconds] :
       {std::pair{get_status, get_seconds}, std::pair{wait_status, wait_seconds}}) {
    INFO(status.ToString());
    CHECK(IsPeerUnavailableOrDeadline(status));
    CHECK(absl::StrContains(status.message(), address));
    CHECK(seconds < kDeadlineSeconds + 1.0);
  }
  CHECK(absl::StrContains(get_status.message(), "never-set"));
  CHECK(absl::StrContains(wait_status.message(), "also-never-set"));
}

TEST_CASE("a server that is down at start gives a clear error after bounded retries") {
  RedisStoreOptions options;
  options.port = PickFreeLoopbackPort();  // nothing listens there
  options.attempts = 4;
  const auto start = steady_clock::now();
  const auto store = RedisStore::Connect(options);
  const double seconds = SecondsSince(start);
  REQUIRE_FALSE(store.ok());
  INFO(store.status().ToString());
  CHECK(GetErrorKind(store.status()) == ErrorKind::kPeerUnavailable);
  CHECK(absl::StrContains(store.status().message(), absl::StrCat("127.0.0.1:", options.port)));
  CHECK(absl::StrContains(store.status().message(), "after 4 tries"));
  CHECK(absl::StrContains(store.status().message(), "redis-server is running"));
  // Backoff 50 + 100 + 200 ms between the four tries; well under the worst case.
  CHECK(seconds >= 0.3);
  CHECK(seconds < 5);
}

TEST_CASE("a hung server cannot make a wait outlive its deadline") {
  auto server = StartServer();
  auto store = ConnectOrFail(OptionsFor(*server));
  REQUIRE(kill(server->pid(), SIGSTOP) == 0);
  const auto start = steady_clock::now();
  const auto value = store->Get("key", Deadline::AfterMillis(500));
  const double seconds = SecondsSince(start);
  kill(server->pid(), SIGCONT);
  REQUIRE_FALSE(value.ok());
  INFO(value.status().ToString());
  CHECK(GetErrorKind(value.status()) == ErrorKind::kDeadlineExceeded);
  CHECK(seconds < 0.5 + 1.0);
}

TEST_CASE("the store reconnects after the server restarts") {
  auto server = StartServer();
  auto store = ConnectOrFail(OptionsFor(*server));
  REQUIRE(store->Set("before", "1").ok());
  CHECK(store->Add("counter", 1).value() == 1);
  const int port = server->port();
  server->Stop();
  RedisServerOptions same_port;
  same_port.port = port;
  server = StartServer(same_port);
  // The server lost its data (no persistence) but the store works again, including Add, whose
  // pooled connection died with the old server.
  CHECK(store->TryGet("before").value() == std::nullopt);
  CHECK(store->Add("counter", 5).value() == 5);
  REQUIRE(store->Set("after", "2").ok());
  CHECK(store->Get("after", Deadline::AfterMillis(5000)).value() == "2");
}

TEST_CASE("AUTH: the right password works, a wrong or missing one fails clearly") {
  RedisServerOptions with_password;
  with_password.password = "s3cret pass";
  auto server = StartServer(with_password);
  RedisStoreOptions options = OptionsFor(*server);

  options.password = "s3cret pass";
  auto store = ConnectOrFail(options);
  REQUIRE(store->Set("k", "v").ok());
  CHECK(store->Get("k", Deadline::AfterMillis(5000)).value() == "v");

  options.password = "wrong";
  options.retry_backoff_initial = absl::Seconds(2);  // a retry would show in the time taken
  const auto start = steady_clock::now();
  const auto refused = RedisStore::Connect(options);
  REQUIRE_FALSE(refused.ok());
  INFO(refused.status().ToString());
  CHECK(GetErrorKind(refused.status()) == ErrorKind::kInvalidArgument);
  CHECK(absl::StrContains(refused.status().message(), "refused AUTH"));
  CHECK(SecondsSince(start) < 1.5);  // not retried

  options.password.clear();
  const auto anonymous = RedisStore::Connect(options);
  REQUIRE_FALSE(anonymous.ok());
  INFO(anonymous.status().ToString());
  CHECK(GetErrorKind(anonymous.status()) == ErrorKind::kInvalidArgument);
  CHECK(absl::StrContains(anonymous.status().message(), "requires a password"));
}

TEST_CASE("batches larger than one command are split") {
  auto server = StartServer();
  RedisStoreOptions options = OptionsFor(*server);
  options.max_keys_per_command = 7;
  auto store = ConnectOrFail(options);
  std::vector<KeyValue> pairs;
  std::vector<std::string> keys;
  for (int i = 0; i < 50; ++i) {
    pairs.emplace_back(absl::StrCat("k", i), absl::StrCat("v", i));
    keys.push_back(pairs.back().first);
  }
  REQUIRE(store->MultiSet(pairs).ok());
  const auto values = store->MultiGet(keys, Deadline::AfterMillis(5000));
  REQUIRE(values.ok());
  for (int i = 0; i < 50; ++i) CHECK((*values)[i] == pairs[i].second);
}

TEST_CASE("keys written expire after the key ttl; a ttl of zero keeps them") {
  auto server = StartServer();
  RedisStoreOptions expiring = OptionsFor(*server);
  expiring.key_ttl = absl::Seconds(1);
  auto store = ConnectOrFail(expiring);
  RedisStoreOptions lasting = OptionsFor(*server);
  lasting.key_ttl = absl::ZeroDuration();
  auto keeper = ConnectOrFail(lasting);
  REQUIRE(store->Set("set", "1").ok());
  REQUIRE(store->MultiSet({{"multi-a", "a"}, {"multi-b", "b"}}).ok());
  REQUIRE(store->Add("added", 3).value() == 3);
  REQUIRE(keeper->Set("kept", "1").ok());
  REQUIRE(keeper->Add("kept-count", 2).value() == 2);
  for (const char* key : {"set", "multi-a", "multi-b", "added", "kept", "kept-count"}) {
    INFO(key);
    CHECK(store->TryGet(key).value().has_value());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));
  for (const char* key : {"set", "multi-a", "multi-b", "added"}) {
    INFO(key);
    CHECK_FALSE(store->TryGet(key).value().has_value());
  }
  CHECK(store->TryGet("kept").value() == std::optional<std::string>("1"));
  CHECK(store->TryGet("kept-count").value() == std::optional<std::string>("2"));
  // A non-integer is still refused by Add, as kInvalidArgument naming the key.
  REQUIRE(keeper->Set("text", "x").ok());
  const auto bad = keeper->Add("text", 1);
  CHECK(GetErrorKind(bad.status()) == ErrorKind::kInvalidArgument);
  CHECK(absl::StrContains(bad.status().message(), "text"));
}

}  // namespace
}  // namespace chorus::testing
