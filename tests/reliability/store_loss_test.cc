// The store disappears during rendezvous: three ranks of a four-rank communicator wait in
// Communicator::Create for the fourth, which never comes, when the store goes away (a real
// redis-server is stopped; the FileStore's directory is removed). Every rank must fail with a
// clear error naming the store, at the latest at its connect deadline, and never hang.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/collectives/communicator.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/file_store.h"
#include "chorus/rendezvous/redis_store.h"
#include "tests/collectives/world.h"
#include "tests/harness/multirank.h"
#include "tests/harness/redis_server.h"
#include "tests/reliability/shared_slots.h"
#include "tests/reliability/timing_summary.h"

namespace chorus::testing {
namespace {

constexpr int kRanks = 4;
constexpr int kPresent = 3;  // rank 3 never joins
const absl::Duration kConnectTimeout = absl::Seconds(2);
// A rank may notice the loss before its deadline (a refused connection) but never later than
// the deadline plus the store's own bounded last call.
const absl::Duration kBound = kConnectTimeout * 1.1;

using OpenStore = std::function<absl::StatusOr<std::unique_ptr<Store>>()>;

// Slots: each rank is waiting in Create (1); how long its Create took (ns).
size_t Waiting(int rank) { return rank; }
size_t Took(int rank) { return kPresent + rank; }

// Runs the present ranks until they are all in Create, calls `vanish`, and checks their errors
// name `store_name`.
void LoseStoreDuringRendezvous(const OpenStore& open, const std::function<void()>& vanish,
                               const std::string& store_name) {
  SharedSlots slots(2 * kPresent);
  RankProcesses processes(kPresent, [&](int rank) -> absl::Status {
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, open());
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, MakeDevice(TransportKind::kTcp, rank));
    CommunicatorOptions options;
    options.connect_timeout = kConnectTimeout;
    slots[Waiting(rank)].store(1);
    const int64_t start = MonotonicNanos();
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        Communicator::Create(*store, "world/0", *device, rank, kRanks, options);
    const absl::Duration took = absl::Nanoseconds(MonotonicNanos() - start);
    slots[Took(rank)].store(absl::ToInt64Nanoseconds(took));
    if (comm.ok()) return InternalError("Create succeeded without rank 3");
    std::fprintf(stderr, "rank %d after %s: %s\n", rank, absl::FormatDuration(took).c_str(),
                 comm.status().ToString().c_str());
    if (took > kBound) return InternalError("too slow: " + comm.status().ToString());
    const ErrorKind kind = GetErrorKind(comm.status());
    if (kind != ErrorKind::kPeerUnavailable && kind != ErrorKind::kDeadlineExceeded) {
      return InternalError("unexpected kind: " + comm.status().ToString());
    }
    if (!absl::StrContains(comm.status().message(), store_name)) {
      return InternalError("the error does not name the store: " + comm.status().ToString());
    }
    return absl::OkStatus();
  });
  REQUIRE(slots.AwaitAtLeast(Waiting(0), kPresent, 1, absl::Seconds(30)));
  // Let the ranks publish their addresses and start waiting for rank 3's.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  vanish();
  std::vector<double> took_seconds;
  for (const ProcessOutcome& outcome : processes.Wait(absl::Seconds(30))) {
    INFO(outcome.Describe());
    CHECK(outcome.ok());
    took_seconds.push_back(slots[Took(outcome.rank)].load() / 1e9);
  }
  WARN("connect timeout 2 s: Create failed after " << SummarizeSeconds(took_seconds));
}

TEST_CASE("redis-server stopped while ranks wait in Communicator::Create") {
  auto server = RedisServer::Start();
  REQUIRE(server.ok());
  RedisStoreOptions options;
  options.host = (*server)->host();
  options.port = (*server)->port();
  LoseStoreDuringRendezvous(
      [&]() -> absl::StatusOr<std::unique_ptr<Store>> { return RedisStore::Connect(options); },
      [&] { (*server)->Stop(); }, absl::StrCat("redis store 127.0.0.1:", options.port));
}

TEST_CASE("file store directory removed while ranks wait in Communicator::Create") {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  LoseStoreDuringRendezvous(
      [&]() -> absl::StatusOr<std::unique_ptr<Store>> { return FileStore::Open(path); },
      [&] { std::filesystem::remove_all(path); }, "file store " + path);
}

}  // namespace
}  // namespace chorus::testing
