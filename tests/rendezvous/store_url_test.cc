// Store URLs: parsing (including every error) and opening real stores from them.
#include "chorus/rendezvous/store_url.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "tests/harness/multirank.h"
#include "tests/harness/redis_server.h"

namespace chorus::testing {
namespace {

TEST_CASE("file URLs name an absolute directory") {
  const auto parsed = ParseStoreUrl("file:///shared/run%2042");
  REQUIRE(parsed.ok());
  CHECK(parsed->kind == StoreUrl::Kind::kFile);
  CHECK(parsed->file_directory == "/shared/run 42");
  CHECK(ParseStoreUrl("FILE:///x").ok());
}

TEST_CASE("redis URLs: host, port, credentials, prefix") {
  auto parsed = ParseStoreUrl("redis://cache.example:7000");
  REQUIRE(parsed.ok());
  CHECK(parsed->kind == StoreUrl::Kind::kRedis);
  CHECK(parsed->redis.host == "cache.example");
  CHECK(parsed->redis.port == 7000);
  CHECK(parsed->redis.password.empty());
  CHECK(parsed->prefix.empty());

  parsed = ParseStoreUrl("redis://:p%40ss:word@10.0.0.5:6380/jobs/42");
  REQUIRE(parsed.ok());
  CHECK(parsed->redis.host == "10.0.0.5");
  CHECK(parsed->redis.port == 6380);
  CHECK(parsed->redis.username.empty());
  CHECK(parsed->redis.password == "p@ss:word");
  CHECK(parsed->prefix == "jobs/42");

  parsed = ParseStoreUrl("redis://alice:pw@localhost");
  REQUIRE(parsed.ok());
  CHECK(parsed->redis.username == "alice");
  CHECK(parsed->redis.password == "pw");
  CHECK(parsed->redis.port == 6379);

  parsed = ParseStoreUrl("redis://[::1]:6390/");
  REQUIRE(parsed.ok());
  CHECK(parsed->redis.host == "::1");
  CHECK(parsed->redis.port == 6390);
  CHECK(parsed->prefix.empty());
}

TEST_CASE("malformed store URLs are refused with the problem named") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/tmp/store", "missing scheme"},
      {"ftp://host/x", "unknown scheme 'ftp'"},
      {"file://relative/dir", "absolute path"},
      {"file:///bad%zzescape", "%-escape"},
      {"redis://", "host is missing"},
      {"redis://:pw@", "host is missing"},
      {"redis://host:", "port after ':' is empty"},
      {"redis://host:0", "not a port"},
      {"redis://host:70000", "not a port"},
      {"redis://host:12ab", "not a port"},
      {"redis://[::1", "unclosed '['"},
      {"redis://[::1]x", "expected ':port'"},
      {"redis://password@host", "credentials"},
      {"redis://:@host", "password after ':' is empty"},
      {"redis://host/pre%2", "%-escape"},
      {"redis://host:6379?db=1", "query"},
      {"memory://", "inside one process"},
  };
  for (const auto& [url, problem] : cases) {
    INFO(url);
    const auto parsed = ParseStoreUrl(url);
    REQUIRE_FALSE(parsed.ok());
    INFO(parsed.status().ToString());
    CHECK(GetErrorKind(parsed.status()) == ErrorKind::kInvalidArgument);
    CHECK(absl::StrContains(parsed.status().message(), problem));
    CHECK(absl::StrContains(parsed.status().message(), "file:///abs/path"));
    CHECK(GetErrorKind(OpenStore(url).status()) == ErrorKind::kInvalidArgument);
  }
}

TEST_CASE("opening a file URL creates a working file store") {
  TempDir dir;
  const std::string path = dir.path() + "/via-url";
  auto store = OpenStore("file://" + path);
  REQUIRE(store.ok());
  REQUIRE((*store)->Set("k", "v").ok());
  CHECK(std::filesystem::is_directory(path));
  CHECK(absl::StrContains((*store)->Describe(), path));
}

TEST_CASE("opening a redis URL with a prefix keeps keys under the prefix") {
  RedisServerOptions options;
  options.password = "pw";
  auto server = RedisServer::Start(options);
  if (!server.ok()) FAIL(server.status().ToString());
  const std::string base = (*server)->url();  // redis://:pw@127.0.0.1:port
  auto prefixed = OpenStore(base + "/comm-3");
  REQUIRE(prefixed.ok());
  REQUIRE((*prefixed)->Set("k", "v").ok());
  auto plain = OpenStore(base);
  REQUIRE(plain.ok());
  CHECK((*plain)->TryGet("comm-3/k").value() == std::optional<std::string>("v"));
  CHECK((*plain)->TryGet("k").value() == std::nullopt);
  CHECK(absl::StrContains((*prefixed)->Describe(), "comm-3/"));
}

TEST_CASE("CHORUS_STORE is read and parsed in one place, and its errors name it") {
  setenv("CHORUS_STORE", "redis://localhost:7000/job7", 1);
  const auto redis = StoreUrlFromEnvironment();
  REQUIRE(redis.ok());
  CHECK(redis->kind == StoreUrl::Kind::kRedis);
  CHECK(redis->redis.host == "localhost");
  CHECK(redis->redis.port == 7000);
  CHECK(redis->prefix == "job7");
  setenv("CHORUS_STORE", "file:///tmp/chorus-ab12", 1);
  const auto file = StoreUrlFromEnvironment();
  REQUIRE(file.ok());
  CHECK(file->kind == StoreUrl::Kind::kFile);
  CHECK(file->file_directory == "/tmp/chorus-ab12");
  unsetenv("CHORUS_STORE");
  const auto unset = StoreUrlFromEnvironment();
  CHECK(GetErrorKind(unset.status()) == ErrorKind::kInvalidArgument);
  CHECK(absl::StrContains(unset.status().message(), "CHORUS_STORE is not set"));
  CHECK(absl::StrContains(unset.status().message(), "chorusrun sets it"));
  setenv("CHORUS_STORE", "ftp://x", 1);
  const auto bad = StoreUrlFromEnvironment();
  CHECK(GetErrorKind(bad.status()) == ErrorKind::kInvalidArgument);
  CHECK(absl::StrContains(bad.status().message(), "CHORUS_STORE='ftp://x'"));
  unsetenv("CHORUS_STORE");
}

TEST_CASE("CHORUS_STORE selects the store") {
  TempDir dir;
  unsetenv("CHORUS_STORE");
  const auto unset = OpenStoreFromEnvironment();
  CHECK(GetErrorKind(unset.status()) == ErrorKind::kInvalidArgument);
  CHECK(absl::StrContains(unset.status().message(), "CHORUS_STORE is not set"));
  setenv("CHORUS_STORE", "redis://host:bad", 1);
  const auto bad = OpenStoreFromEnvironment();
  CHECK(absl::StrContains(bad.status().message(), "CHORUS_STORE='redis://host:bad': store URL"));
  setenv("CHORUS_STORE", ("file://" + dir.path()).c_str(), 1);
  const auto good = OpenStoreFromEnvironment();
  CHECK(good.ok());
  unsetenv("CHORUS_STORE");
}

}  // namespace
}  // namespace chorus::testing
