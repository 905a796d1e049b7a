// GroupGeneration over every store: ranks agree on a generation per creation of a name, a new
// generation never sees an old one's keys, leaving cleans up, and a live name is refused.
#include "chorus/rendezvous/group_generation.h"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/host_identity.h"
#include "chorus/core/status.h"
#include "tests/rendezvous/store_fixtures.h"

namespace chorus::testing {
namespace {

#define STORE_FIXTURES MemoryStoreFixture, FileStoreFixture, PrefixStoreFixture, RedisStoreFixture

constexpr char kName[] = "chorus/comm/w";
constexpr int kRanks = 3;

// The value of `key` now, or "" if it is absent.
std::string Peek(Store& store, const std::string& key) {
  absl::StatusOr<std::optional<std::string>> value = store.TryGet(key);
  REQUIRE(value.ok());
  return value->value_or("");
}

// A pid that no process has: a child's, once it has exited and been reaped.
pid_t EndedPid() {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  return child;
}

TEMPLATE_TEST_CASE("each creation of a name is a generation of its own, cleaned up on leaving",
                   "[group_generation]", STORE_FIXTURES) {
  TestType fixture;
  Store& store = fixture.store();
  for (int64_t cycle = 1; cycle <= 5; ++cycle) {
    std::vector<absl::Status> statuses(kRanks);
    std::vector<std::thread> ranks;
    for (int rank = 0; rank < kRanks; ++rank) {
      ranks.emplace_back([&, rank] {
        statuses[rank] = [&]() -> absl::Status {
          CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<GroupGeneration> generation,
                                  GroupGeneration::Join(store, kName, rank, kRanks));
          if (generation->generation() != cycle) {
            return InternalError(absl::StrCat("generation ", generation->generation()));
          }
          CHORUS_RETURN_IF_ERROR(
              generation->Set(absl::StrCat("addr/", rank), absl::StrCat(cycle, ":", rank)));
          for (int peer = 0; peer < kRanks; ++peer) {
            CHORUS_ASSIGN_OR_RETURN(
                const std::string address,
                generation->Get(absl::StrCat("addr/", peer), Deadline::After(absl::Seconds(10))));
            if (address != absl::StrCat(cycle, ":", peer)) {
              return InternalError(absl::StrCat("read '", address, "' from rank ", peer));
            }
          }
          CHORUS_RETURN_IF_ERROR(generation->SetUp());
          // A record written after set-up (a failure's cause) stays until the last one leaves.
          CHORUS_RETURN_IF_ERROR(generation->Add("failure_claims", 1).status());
          if (rank == 0) CHORUS_RETURN_IF_ERROR(generation->Set("failure", "x"));
          return absl::OkStatus();
        }();
      });
    }
    for (std::thread& rank : ranks) rank.join();
    for (int rank = 0; rank < kRanks; ++rank) {
      INFO("cycle " << cycle << ", rank " << rank << ": " << statuses[rank].ToString());
      REQUIRE(statuses[rank].ok());
    }
    // Every rank has left: only the join counts and the (released) holder counts remain.
    const std::string g = absl::StrCat(kName, "/g", cycle, "/");
    for (int rank = 0; rank < kRanks; ++rank) {
      CHECK(Peek(store, absl::StrCat(g, "leftover/", rank)) == "");
    }
    for (const char* key : {"set_up", "left", "failure_claims", "failure"}) {
      CHECK(Peek(store, g + key) == "");
    }
    for (int rank = 0; rank < kRanks; ++rank) {
      CHECK(Peek(store, absl::StrCat(g, "addr/", rank)) == "");
      CHECK(Peek(store, absl::StrCat(kName, "/holder/", rank)) == "");
      CHECK(Peek(store, absl::StrCat(kName, "/holders/", rank)) == "0");
      CHECK(Peek(store, absl::StrCat(kName, "/joins/", kRanks, "/", rank)) ==
            std::to_string(cycle));
    }
  }
}

TEMPLATE_TEST_CASE("a name live in this process is refused until it is left", "[group_generation]",
                   STORE_FIXTURES) {
  TestType fixture;
  Store& store = fixture.store();
  auto live = GroupGeneration::Join(store, kName, 1, 2);
  REQUIRE(live.ok());
  REQUIRE((*live)->SetUp().ok());
  const auto again = GroupGeneration::Join(store, kName, 1, 2);
  INFO(again.status().ToString());
  CHECK(GetErrorKind(again.status()) == ErrorKind::kInvalidArgument);
  CHECK(absl::StrContains(again.status().message(), "'chorus/comm/w'"));
  CHECK(absl::StrContains(again.status().message(), "still in use: its rank 1"));
  CHECK(absl::StrContains(again.status().message(), absl::StrCat(" ", getpid())));
  // Another rank of the same name is a different holder.
  CHECK(GroupGeneration::Join(store, kName, 0, 2).ok());
  live->reset();
  const auto after = GroupGeneration::Join(store, kName, 1, 2);
  INFO(after.status().ToString());
  REQUIRE(after.ok());
  CHECK((*after)->generation() == 2);
}

TEMPLATE_TEST_CASE("a rank whose set-up failed leaves the store alone and can join again",
                   "[group_generation]", STORE_FIXTURES) {
  TestType fixture;
  Store& store = fixture.store();
  {
    auto failed = GroupGeneration::Join(store, kName, 0, 2);
    REQUIRE(failed.ok());
    REQUIRE((*failed)->Set("addr/0", "a").ok());
  }  // never set up: its keys stay, a peer may still be reading them
  CHECK(Peek(store, absl::StrCat(kName, "/g1/addr/0")) == "a");
  const auto retry = GroupGeneration::Join(store, kName, 0, 2);
  INFO(retry.status().ToString());
  REQUIRE(retry.ok());
  CHECK((*retry)->generation() == 2);
  CHECK(Peek(store, absl::StrCat(kName, "/holders/0")) == "1");
}

TEMPLATE_TEST_CASE("a holder whose process ended is taken over; one on another host is not",
                   "[group_generation]", STORE_FIXTURES) {
  TestType fixture;
  Store& store = fixture.store();
  const std::string holders = absl::StrCat(kName, "/holders/0");
  const std::string holder = absl::StrCat(kName, "/holder/0");
  // A process of this host that joined and ended without leaving.
  REQUIRE(store.Add(holders, 1).ok());
  REQUIRE(store.Set(holder, absl::StrCat(LocalHostIdentity(), " ", EndedPid())).ok());
  auto taken = GroupGeneration::Join(store, kName, 0, 2);
  INFO(taken.status().ToString());
  REQUIRE(taken.ok());
  CHECK(Peek(store, holders) == "1");
  CHECK(Peek(store, holder) == absl::StrCat(LocalHostIdentity(), " ", getpid()));
  REQUIRE((*taken)->SetUp().ok());
  taken->reset();
  // One of another host: it cannot be checked, so it counts as live.
  REQUIRE(store.Add(holders, 1).ok());
  REQUIRE(store.Set(holder, "otherhost/1 42").ok());
  const auto refused = GroupGeneration::Join(store, kName, 0, 2);
  INFO(refused.status().ToString());
  CHECK(GetErrorKind(refused.status()) == ErrorKind::kInvalidArgument);
  CHECK(absl::StrContains(refused.status().message(), "otherhost/1 42"));
  CHECK(Peek(store, holders) == "1");  // the refused claim took nothing
}

}  // namespace
}  // namespace chorus::testing
