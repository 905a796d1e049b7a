// The bootstrap exchange: agreement on addresses and job id, O(N) store traffic per rank,
// argument checks and errors that name the missing ranks.
#include "chorus/rendezvous/bootstrap.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/file_store.h"
#include "chorus/rendezvous/memory_store.h"
#include "chorus/rendezvous/store_url.h"
#include "tests/harness/multirank.h"
#include "tests/harness/redis_server.h"
#include "tests/rendezvous/counting_store.h"

namespace chorus::testing {
namespace {

std::string AddressOf(int rank) {
  return absl::StrCat("10.0.", rank / 256, ".", rank % 256, ":", 9000 + rank);
}

// Checks one rank's view: every address right, job id non-zero.
absl::Status CheckResult(const BootstrapResult& result, int size) {
  if (result.job_id == 0) return absl::InternalError("job id is zero");
  if (static_cast<int>(result.addresses.size()) != size) {
    return absl::InternalError(absl::StrCat(result.addresses.size(), " addresses, not ", size));
  }
  for (int peer = 0; peer < size; ++peer) {
    if (result.addresses[peer] != AddressOf(peer)) {
      return absl::InternalError(
          absl::StrCat("address of rank ", peer, " is '", result.addresses[peer], "'"));
    }
  }
  return absl::OkStatus();
}

TEST_CASE("64 thread ranks agree, each with O(N / batch) store operations") {
  constexpr int kSize = 64;
  constexpr int kBatch = 8;
  MemoryStore shared;
  std::vector<std::unique_ptr<CountingStore>> counters;
  for (int rank = 0; rank < kSize; ++rank)
    counters.push_back(std::make_unique<CountingStore>(shared));
  std::vector<uint64_t> job_ids(kSize);
  BootstrapOptions options;
  options.batch_size = kBatch;
  const auto statuses = RunRanksAsThreads(
      kSize,
      [&](int rank) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(BootstrapResult result,
                                ExchangeAddresses(*counters[rank], rank, kSize, AddressOf(rank),
                                                  Deadline::After(absl::Seconds(30)), options));
        job_ids[rank] = result.job_id;
        return CheckResult(result, kSize);
      },
      absl::Seconds(60));
  for (int rank = 0; rank < kSize; ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].ToString());
    CHECK(statuses[rank].ok());
    CHECK(job_ids[rank] == job_ids[0]);
    // One Set plus one MultiGet per batch: 1 + 64 / 8 = 9 round trips, N + 1 keys.
    CHECK(counters[rank]->operations() <= kSize / kBatch + 2);
    CHECK(counters[rank]->keys() <= kSize + 2);
    CHECK(counters[rank]->operations() * 4 < kSize);  // far from one call per peer, let alone N^2
  }
  CHECK(job_ids[0] != 0);
}

// Forks 16 ranks that each open `url` themselves and bootstrap through it; checks they all
// got every address and the same job id.
void BootstrapSixteenProcesses(const std::string& url) {
  constexpr int kSize = 16;
  const auto outcomes = RunRanksAsProcesses(
      kSize,
      [&](int rank) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStore(url));
        CHORUS_ASSIGN_OR_RETURN(BootstrapResult result,
                                ExchangeAddresses(*store, rank, kSize, AddressOf(rank),
                                                  Deadline::After(absl::Seconds(30))));
        CHORUS_RETURN_IF_ERROR(CheckResult(result, kSize));
        // Report the job id for the parent to compare.
        return store->Set(absl::StrCat("result/", rank), absl::StrCat(result.job_id));
      },
      absl::Seconds(60));
  for (const ProcessOutcome& outcome : outcomes) {
    INFO(outcome.Describe());
    CHECK(outcome.ok());
  }
  auto store = OpenStore(url);
  REQUIRE(store.ok());
  const auto first = (*store)->TryGet("result/0").value();
  REQUIRE(first.has_value());
  CHECK(*first != "0");
  for (int rank = 1; rank < kSize; ++rank) {
    CHECK((*store)->TryGet(absl::StrCat("result/", rank)).value() == first);
  }
}

TEST_CASE("16 processes rendezvous through a file store") {
  TempDir dir;
  BootstrapSixteenProcesses(absl::StrCat("file://", dir.path(), "/bootstrap"));
}

TEST_CASE("16 processes rendezvous through a redis store") {
  auto server = RedisServer::Start();
  if (!server.ok()) FAIL(server.status().ToString());
  BootstrapSixteenProcesses((*server)->url() + "/job-1");
}

TEST_CASE("a single rank bootstraps alone") {
  MemoryStore store;
  const auto result = ExchangeAddresses(store, 0, 1, "only", Deadline::AfterMillis(1000));
  REQUIRE(result.ok());
  CHECK(result->addresses == std::vector<std::string>{"only"});
  CHECK(result->job_id != 0);
}

TEST_CASE("bootstrap refuses bad ranks, sizes and batch sizes") {
  MemoryStore store;
  const Deadline deadline = Deadline::AfterMillis(100);
  for (const auto& [rank, size] : std::vector<std::pair<int, int>>{{-1, 4}, {4, 4}, {0, 0}}) {
    const auto result = ExchangeAddresses(store, rank, size, "a", deadline);
    INFO(rank << " of " << size);
    CHECK(GetErrorKind(result.status()) == ErrorKind::kInvalidArgument);
  }
  BootstrapOptions zero_batch;
  zero_batch.batch_size = 0;
  CHECK(GetErrorKind(ExchangeAddresses(store, 0, 2, "a", deadline, zero_batch).status()) ==
        ErrorKind::kInvalidArgument);
}

TEST_CASE("a bootstrap timeout names the ranks that never published") {
  TempDir dir;
  auto file_store = FileStore::Open(dir.path());
  REQUIRE(file_store.ok());
  MemoryStore memory_store;
  for (Store* store : {static_cast<Store*>(&memory_store), static_cast<Store*>(file_store->get())}) {
    INFO(store->Describe());
    // Ranks 1, 3 and 5 arrived; 2, 4 and 6-9 never did.
    for (int rank : {1, 3, 5}) {
      REQUIRE(store->Set(absl::StrCat("addr/", rank), AddressOf(rank)).ok());
    }
    BootstrapOptions options;
    options.batch_size = 4;
    const auto start = std::chrono::steady_clock::now();
    const auto result =
        ExchangeAddresses(*store, 0, 10, AddressOf(0), Deadline::AfterMillis(100), options);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
    REQUIRE_FALSE(result.ok());
    CHECK(GetErrorKind(result.status()) == ErrorKind::kDeadlineExceeded);
    CHECK(absl::StrContains(result.status().message(), "ranks [2, 4, 6-9]"));
    CHECK(absl::StrContains(result.status().message(), store->Describe()));
    CHECK(ErrorPeerRank(result.status()) == 2);
  }
}

TEST_CASE("a foreign record under rank 0's key is a mismatch, not garbage") {
  MemoryStore store;
  REQUIRE(store.Set("addr/0", "not-a-job-id").ok());
  const auto result = ExchangeAddresses(store, 1, 2, "b", Deadline::AfterMillis(1000));
  REQUIRE_FALSE(result.ok());
  CHECK(GetErrorKind(result.status()) == ErrorKind::kMismatch);
  CHECK(absl::StrContains(result.status().message(), "addr/0"));
}

// Runs ExchangeAddresses as `rank` of 4 with ranks 1 and 3 published and 0/2 as the test
// says, progress every 50 ms, logging into a fresh file; returns what was logged.
std::string LoggedWhileWaiting(const TempDir& dir, int rank, bool rank0_published) {
  MemoryStore store;
  REQUIRE(store.Set("addr/1", AddressOf(1)).ok());
  REQUIRE(store.Set("addr/3", AddressOf(3)).ok());
  if (rank0_published && rank != 0) REQUIRE(store.Set("addr/0", "0123456789abcdef" + AddressOf(0)).ok());
  const std::string log_prefix = absl::StrCat(dir.path(), "/rank", rank, rank0_published);
  setenv("CHORUS_LOG_FILE", log_prefix.c_str(), 1);
  ReloadLogConfig();
  BootstrapOptions options;
  options.progress_interval = absl::Milliseconds(50);
  const auto result =
      ExchangeAddresses(store, rank, 4, AddressOf(rank), Deadline::AfterMillis(400), options);
  unsetenv("CHORUS_LOG_FILE");
  ReloadLogConfig();
  CHECK(GetErrorKind(result.status()) == ErrorKind::kDeadlineExceeded);
  std::ifstream file(absl::StrCat(log_prefix, ".", getpid(), ".log"));
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST_CASE("while ranks are missing, the lowest rank present names them every interval") {
  TempDir dir;
  // Rank 0 is the lowest present: it reports rank 2 (and rank 0 itself is not missing).
  const std::string rank0 = LoggedWhileWaiting(dir, 0, true);
  CHECK(absl::StrContains(rank0, "bootstrap: rank 0 of 4 has waited"));
  CHECK(absl::StrContains(rank0, "for ranks [2] to publish their addresses"));
  CHECK(absl::StrContains(rank0, "still waiting, for up to"));
  int lines = 0;
  for (size_t at = rank0.find("has waited"); at != std::string::npos;
       at = rank0.find("has waited", at + 1)) {
    ++lines;
  }
  CHECK(lines >= 3);  // 400 ms at one line per 50 ms slice, less the probes' time
  CHECK(lines <= 8);
  // Rank 3 is not the lowest present (rank 0 has published): it stays quiet.
  CHECK_FALSE(absl::StrContains(LoggedWhileWaiting(dir, 3, true), "has waited"));
  // With rank 0 missing, rank 1 is the lowest present and reports ranks 0 and 2.
  CHECK(absl::StrContains(LoggedWhileWaiting(dir, 1, false), "for ranks [0, 2] to publish"));
}

}  // namespace
}  // namespace chorus::testing
