// The bootstrap exchange: agreement on addresses and job id, O(N) store traffic per rank,
// argument checks and errors that name the missing ranks.
#include "chorus/rendezvous/bootstrap.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

}  // namespace
}  // namespace chorus::testing
