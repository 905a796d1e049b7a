#include "tests/transport/scenario.h"

#include <thread>

#include "chorus/core/logging.h"
#include "chorus/rendezvous/file_store.h"
#include "chorus/rendezvous/memory_store.h"
#include "tests/harness/multirank.h"

namespace chorus::testing {
namespace {

constexpr absl::Duration kSetupTimeout = absl::Seconds(20);
// A scenario that runs longer is hung: the harness aborts (threads) or kills (processes) it.
constexpr absl::Duration kScenarioTimeout = absl::Seconds(60);

absl::Status RunRank(const TransportFactory& transport, Store& store, int rank, int size,
                     bool separate_process, const ScenarioBody& body) {
  absl::StatusOr<std::unique_ptr<Device>> device = transport.create_device(rank);
  if (!device.ok()) return Annotate(device.status(), "creating the device");
  MeshOptions options;
  options.connect_timeout = kSetupTimeout;
  absl::StatusOr<std::unique_ptr<Mesh>> mesh =
      (*device)->CreateMesh(store, rank, size, options, Deadline::After(kSetupTimeout));
  if (!mesh.ok()) return Annotate(mesh.status(), "creating the mesh");
  RankEnv env;
  env.rank = rank;
  env.size = size;
  env.separate_process = separate_process;
  env.store = &store;
  env.mesh = &*mesh;
  env.device = device->get();
  const absl::Status status = body(env);
  mesh->reset();
  device->reset();
  return status;
}

}  // namespace

std::vector<absl::Status> RunScenarioOnce(const TransportFactory& transport, RankMode mode,
                                          int size, const ScenarioBody& body) {
  std::vector<absl::Status> statuses;
  if (mode == RankMode::kThreads) {
    MemoryStore store;
    return RunRanksAsThreads(
        size, [&](int rank) { return RunRank(transport, store, rank, size, false, body); },
        kScenarioTimeout);
  }
  TempDir directory;
  const auto outcomes = RunRanksAsProcesses(
      size,
      [&](int rank) -> absl::Status {
        absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(directory.path());
        if (!store.ok()) return store.status();
        return RunRank(transport, **store, rank, size, true, body);
      },
      kScenarioTimeout);
  for (const ProcessOutcome& outcome : outcomes) {
    statuses.push_back(outcome.ok() ? absl::OkStatus() : InternalError(outcome.Describe()));
  }
  return statuses;
}

absl::Status Barrier(const RankEnv& env, const std::string& name) {
  CHORUS_RETURN_IF_ERROR(env.store->Set(absl::StrCat(name, "/", env.rank), "1"));
  std::vector<std::string> keys;
  for (int rank = 0; rank < env.size; ++rank) keys.push_back(absl::StrCat(name, "/", rank));
  return env.store->Wait(keys, Deadline::After(kSetupTimeout));
}

std::vector<uint8_t> Pattern(uint64_t seed, size_t size) {
  std::vector<uint8_t> data(size);
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < size; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    data[i] = static_cast<uint8_t>((state >> 56) | 1);
  }
  return data;
}

std::string CheckPattern(const uint8_t* data, size_t size, uint64_t seed) {
  const std::vector<uint8_t> expected = Pattern(seed, size);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] != expected[i]) {
      return absl::StrCat("byte ", i, " of ", size, " is ", int{data[i]}, ", expected ",
                          int{expected[i]}, " (pattern ", seed, ")");
    }
  }
  return "";
}

}  // namespace chorus::testing
