// File-store specifics: many processes racing on one directory, long keys, and a directory
// that is unusable or disappears.
#include "chorus/rendezvous/file_store.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "tests/harness/multirank.h"

namespace chorus::testing {
namespace {

std::unique_ptr<FileStore> OpenOrDie(const std::string& directory) {
  auto store = FileStore::Open(directory);
  REQUIRE(store.ok());
  return *std::move(store);
}

void RequireAllOk(const std::vector<ProcessOutcome>& outcomes) {
  for (const ProcessOutcome& outcome : outcomes) {
    INFO(outcome.Describe());
    CHECK(outcome.ok());
  }
}

// Writer `writer`'s value number `serial`: a header naming both, then filler that repeats a
// byte derived from them, up to a fixed length. A torn read shows as a wrong length or filler.
std::string RaceValue(int writer, int serial, size_t length) {
  std::string value = absl::StrCat(writer, ":", serial, ":");
  value.resize(length, static_cast<char>('a' + (writer * 7 + serial) % 26));
  return value;
}

absl::Status CheckRaceValue(const std::string& value, size_t length) {
  const size_t first = value.find(':');
  const size_t second = value.find(':', first + 1);
  int writer = 0;
  int serial = 0;
  if (value.size() != length || first == std::string::npos || second == std::string::npos ||
      !absl::SimpleAtoi(value.substr(0, first), &writer) ||
      !absl::SimpleAtoi(value.substr(first + 1, second - first - 1), &serial) ||
      value != RaceValue(writer, serial, length)) {
    return absl::InternalError(absl::StrCat("torn or foreign value of ", value.size(),
                                            " bytes starting '", value.substr(0, 24), "'"));
  }
  return absl::OkStatus();
}

TEST_CASE("racing writer processes never expose a partial value to reader processes") {
  TempDir dir;
  const std::string path = dir.path() + "/race";
  OpenOrDie(path);
  constexpr int kWriters = 4;
  constexpr int kReaders = 4;
  constexpr int kWritesPerWriter = 150;
  constexpr size_t kLength = 256 * 1024;  // many write() calls per value: tearing is possible
  const auto outcomes = RunRanksAsProcesses(
      kWriters + kReaders,
      [&](int rank) -> absl::Status {
        auto store = FileStore::Open(path);
        if (!store.ok()) return store.status();
        if (rank < kWriters) {
          for (int serial = 0; serial < kWritesPerWriter; ++serial) {
            CHORUS_RETURN_IF_ERROR((*store)->Set("contended", RaceValue(rank, serial, kLength)));
          }
          return (*store)->Add("writers-done", 1).status();
        }
        // Readers read until every writer is done (bounded by the harness timeout).
        int reads = 0;
        while (true) {
          auto done = (*store)->TryGet("writers-done");
          if (!done.ok()) return done.status();
          const bool last_round = done->has_value() && **done == absl::StrCat(kWriters);
          auto value = (*store)->TryGet("contended");
          if (!value.ok()) return value.status();
          if (value->has_value()) {
            CHORUS_RETURN_IF_ERROR(CheckRaceValue(**value, kLength));
            ++reads;
          }
          if (last_round) break;
        }
        return reads > 0 ? absl::OkStatus() : absl::InternalError("reader saw no value at all");
      },
      absl::Seconds(60));
  RequireAllOk(outcomes);
  // No temporary file was left behind.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(path)) {
    INFO(entry.path().string());
    CHECK_FALSE(absl::StrContains(entry.path().filename().string(), ".tmp."));
    ++files;
  }
  CHECK(files > 0);
}

TEST_CASE("add from many processes is exact and hands out distinct values") {
  TempDir dir;
  const std::string path = dir.path() + "/adders";
  constexpr int kProcesses = 8;
  constexpr int kAdds = 100;
  const auto outcomes = RunRanksAsProcesses(
      kProcesses,
      [&](int rank) -> absl::Status {
        auto store = FileStore::Open(path);
        if (!store.ok()) return store.status();
        for (int i = 0; i < kAdds; ++i) {
          CHORUS_ASSIGN_OR_RETURN(const int64_t value, (*store)->Add("counter", 1));
          // Record who got each value; a value handed out twice would be recorded twice.
          CHORUS_ASSIGN_OR_RETURN(const int64_t claims,
                                  (*store)->Add(absl::StrCat("claims/", value), 1));
          if (claims != 1) return absl::InternalError(absl::StrCat("value ", value, " twice"));
        }
        return absl::OkStatus();
      },
      absl::Seconds(60));
  RequireAllOk(outcomes);
  auto store = OpenOrDie(path);
  CHECK(store->TryGet("counter").value() ==
        std::optional<std::string>(absl::StrCat(kProcesses * kAdds)));
  int claimed = 0;
  for (int value = 1; value <= kProcesses * kAdds; ++value) {
    claimed += store->TryGet(absl::StrCat("claims/", value)).value().has_value();
  }
  CHECK(claimed == kProcesses * kAdds);
}

TEST_CASE("long keys map to distinct files; keys over 512 bytes are refused") {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  // Escaped, these span several nested directories; one is a prefix of the other.
  const std::string long_key(512, '.');
  const std::string prefix_key(181, '.');
  const std::string piece_key(60, '.');  // escapes to exactly one 180-character piece
  REQUIRE(store->Set(long_key, "long").ok());
  REQUIRE(store->Set(prefix_key, "prefix").ok());
  REQUIRE(store->Set(piece_key, "piece").ok());
  CHECK(store->TryGet(long_key).value() == std::optional<std::string>("long"));
  CHECK(store->TryGet(prefix_key).value() == std::optional<std::string>("prefix"));
  CHECK(store->TryGet(piece_key).value() == std::optional<std::string>("piece"));
  CHECK(store->Add(long_key, 0).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(store->Add(std::string(300, 'n'), 4).value() == 4);
  const auto too_long = store->Set(std::string(513, 'x'), "v");
  CHECK(GetErrorKind(too_long) == ErrorKind::kInvalidArgument);
  CHECK(absl::StrContains(too_long.message(), "512"));
  REQUIRE(store->Delete(long_key).ok());
  CHECK(store->TryGet(long_key).value() == std::nullopt);
}

TEST_CASE("file store creates its directory, and refuses one it cannot use") {
  TempDir dir;
  const std::string nested = dir.path() + "/a/b/c";
  auto store = FileStore::Open(nested);
  REQUIRE(store.ok());
  CHECK(std::filesystem::is_directory(nested));
  CHECK(absl::StrContains((*store)->Describe(), nested));

  const std::string file = dir.path() + "/plain-file";
  std::ofstream(file) << "x";
  for (const std::string& bad :
       {file, file + "/below", std::string("/proc/chorus-no-such"), std::string()}) {
    INFO(bad);
    auto refused = FileStore::Open(bad);
    REQUIRE_FALSE(refused.ok());
    CHECK(GetErrorKind(refused.status()) == ErrorKind::kInvalidArgument);
    CHECK(absl::StrContains(refused.status().message(), "file store"));
  }
}

TEST_CASE("a directory that disappears fails waits promptly instead of hanging") {
  TempDir dir;
  const std::string path = dir.path() + "/vanishing";
  auto store = OpenOrDie(path);
  REQUIRE(store->Set("k", "v").ok());
  std::filesystem::remove_all(path);

  const auto start = std::chrono::steady_clock::now();
  const auto value = store->Get("missing", Deadline::After(absl::Seconds(10)));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  REQUIRE_FALSE(value.ok());
  CHECK(GetErrorKind(value.status()) == ErrorKind::kPeerUnavailable);
  CHECK(absl::StrContains(value.status().message(), path));
  CHECK(absl::StrContains(value.status().message(), "gone"));
  CHECK(GetErrorKind(store->Set("k", "v2")) == ErrorKind::kPeerUnavailable);
  CHECK(GetErrorKind(store->Add("n", 1).status()) == ErrorKind::kPeerUnavailable);
  CHECK(GetErrorKind(store->TryGet("k").status()) == ErrorKind::kPeerUnavailable);
}

TEST_CASE("file store timeouts name the directory and all missing keys") {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  std::vector<std::string> keys;
  for (int i = 0; i < 20; ++i) keys.push_back(absl::StrCat("rank/", i));
  const absl::Status status = store->Wait(keys, Deadline::AfterMillis(50));
  CHECK(GetErrorKind(status) == ErrorKind::kDeadlineExceeded);
  CHECK(absl::StrContains(status.message(), dir.path()));
  CHECK(absl::StrContains(status.message(), "'rank/0'"));
  CHECK(absl::StrContains(status.message(), "and 12 more"));
}

}  // namespace
}  // namespace chorus::testing
