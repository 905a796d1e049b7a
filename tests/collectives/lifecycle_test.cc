// Communicator lifecycle: one name created and destroyed many times, on every store kind and
// transport, with ranks as processes and no synchronisation between the cycles; a name that is
// still live is refused.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/collectives/communicator.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/memory_store.h"
#include "chorus/rendezvous/store_url.h"
#include "tests/collectives/world.h"
#include "tests/harness/multirank.h"
#include "tests/harness/redis_server.h"

namespace chorus::testing {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kCycles = 20;
#else
constexpr int kCycles = 100;
#endif
// One rank is slow on purpose in these cycles: before creating, and before destroying.
constexpr int kLateCreateCycle = 3;
constexpr int kLateDestroyCycle = 5;
constexpr auto kLate = std::chrono::milliseconds(200);

// `cycles` times on every rank: create communicator "w", one allreduce checked, destroy.
absl::Status CreateAndDestroy(Store& store, Device& device, int rank, int size, int cycles) {
  CommunicatorOptions options;
  options.timeout = absl::Seconds(30);
  options.connect_timeout = absl::Seconds(30);
  const int late_rank = size - 1;
  for (int cycle = 0; cycle < cycles; ++cycle) {
    if (rank == late_rank && cycle == kLateCreateCycle) std::this_thread::sleep_for(kLate);
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        Communicator::Create(store, "w", device, rank, size, options);
    if (!comm.ok()) return Annotate(comm.status(), absl::StrCat("cycle ", cycle));
    int64_t value = rank + cycle;
    CHORUS_RETURN_IF_ERROR(Annotate(
        (*comm)->AllReduce(&value, &value, 1, DataType::kInt64, ReduceOp::kSum),
        absl::StrCat("cycle ", cycle)));
    const int64_t expected = int64_t{size} * (size - 1) / 2 + int64_t{size} * cycle;
    CHORUS_RETURN_IF_ERROR(
        Expect(value == expected, absl::StrCat("cycle ", cycle, ": sum ", value, ", expected ",
                                               expected)));
    if (rank == late_rank && cycle == kLateDestroyCycle) std::this_thread::sleep_for(kLate);
  }
  return absl::OkStatus();
}

void CycleAsProcesses(const std::string& store_url, TransportKind transport, int size) {
  const std::vector<ProcessOutcome> outcomes = RunRanksAsProcesses(
      size,
      [&](int rank) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStore(store_url));
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, MakeDevice(transport, rank));
        return CreateAndDestroy(*store, *device, rank, size, kCycles);
      },
      absl::Minutes(3));
  for (const ProcessOutcome& outcome : outcomes) {
    INFO(outcome.Describe());
    CHECK(outcome.ok());
  }
}

TEST_CASE("one name created and destroyed again and again, on every store and transport") {
  // Each store serves the name to groups of 2, 3 and 4 ranks in turn, as a framework that
  // re-creates its process group at another size would.
  TempDir directory;
  absl::StatusOr<std::unique_ptr<RedisServer>> redis = RedisServer::Start();
  REQUIRE(redis.ok());
  const std::vector<std::pair<TransportKind, int>> transports = {
      {TransportKind::kTcp, 2}, {TransportKind::kShm, 3}, {TransportKind::kHybrid, 4}};
  for (const std::string& url : {absl::StrCat("file://", directory.path()), (*redis)->url()}) {
    for (const auto& [transport, size] : transports) {
      INFO(url << ", " << TransportName(transport) << ", " << size << " ranks");
      CycleAsProcesses(url, transport, size);
    }
  }
}

TEST_CASE("a memory store serves many generations of a name to rank threads") {
  MemoryStore store;
  std::vector<std::unique_ptr<Device>> devices;
  for (int rank = 0; rank < 3; ++rank) {
    absl::StatusOr<std::unique_ptr<Device>> device = MakeDevice(TransportKind::kInproc, rank);
    REQUIRE(device.ok());
    devices.push_back(*std::move(device));
  }
  const std::vector<absl::Status> statuses = RunRanksAsThreads(
      3,
      [&](int rank) { return CreateAndDestroy(store, *devices[rank], rank, 3, kCycles); },
      absl::Minutes(2));
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].ToString());
    CHECK(statuses[rank].ok());
  }
}

TEST_CASE("creating a name that is still live is refused, naming it; after destroy it works") {
  MemoryStore store;
  absl::StatusOr<std::unique_ptr<Device>> device = MakeDevice(TransportKind::kInproc, 0);
  REQUIRE(device.ok());
  auto first = Communicator::Create(store, "w", **device, 0, 1);
  REQUIRE(first.ok());
  const auto second = Communicator::Create(store, "w", **device, 0, 1);
  INFO(second.status().ToString());
  CHECK(GetErrorKind(second.status()) == ErrorKind::kInvalidArgument);
  CHECK(absl::StrContains(second.status().message(), "communicator 'w' rank 0"));
  CHECK(absl::StrContains(second.status().message(), "still in use"));
  first->reset();
  auto third = Communicator::Create(store, "w", **device, 0, 1);
  INFO(third.status().ToString());
  REQUIRE(third.ok());
  CHECK((*third)->Barrier().ok());
}

}  // namespace
}  // namespace chorus::testing
