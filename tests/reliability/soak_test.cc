// Soak: four ranks (threads, each with one TCP device) each drive two communicators over the
// same devices and store at once, one thread per communicator, through a long seeded mix of
// small and large allreduce, broadcast, allgather, reduce-scatter, alltoall and barrier calls
// in four types, blocking and asynchronous (up to three Work handles in flight). Every result
// is checked exactly. Resident memory and open descriptors are taken after a warm-up round and
// at the end; neither may grow past a small bound.
//
// CHORUS_SOAK_SECONDS (default 45, the CI run) bounds the time; kMaxCallsPerComm bounds the
// count. A manual soak runs a few minutes:
//   bazel test //tests/reliability:soak_test --test_env=CHORUS_SOAK_SECONDS=300
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chorus/core/env.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/memory_store.h"
#include "tests/collectives/world.h"
#include "tests/harness/multirank.h"
#include "tests/reliability/process_usage.h"
#include "tests/reliability/soak_call.h"

namespace chorus::testing {
namespace {

constexpr int kRanks = 4;
constexpr int kComms = 2;
constexpr int64_t kMaxCallsPerComm = 1000000;
constexpr int kCallsPerRound = 64;  // the ranks agree to stop only between rounds
constexpr int64_t kWarmupCallsPerComm = 4096;
constexpr int64_t kRssBoundBytes = int64_t{32} << 20;

// One rank's driver of one communicator: rounds of seeded calls from `*index` on, until rank 0
// says stop (broadcast after each round, so that every rank issues the same calls) because
// `stop_at` has passed or `*index` has reached `max_index`.
absl::Status Drive(Communicator& comm, int stream, std::chrono::steady_clock::time_point stop_at,
                   int64_t max_index, int64_t* index) {
  for (;;) {
    CHORUS_RETURN_IF_ERROR(RunSoakRound(comm, stream, *index, kCallsPerRound));
    *index += kCallsPerRound;
    int32_t stop =
        comm.rank() == 0 && (std::chrono::steady_clock::now() >= stop_at || *index >= max_index);
    CHORUS_RETURN_IF_ERROR(comm.Broadcast(&stop, &stop, 1, DataType::kInt32, 0));
    if (stop != 0) return absl::OkStatus();
  }
}

// Runs `body(c)` for c in [0, kComms) on one thread each; the first error.
template <typename Body>
absl::Status OnEachComm(const Body& body) {
  std::vector<absl::Status> statuses(kComms);
  std::vector<std::thread> threads;
  for (int c = 0; c < kComms; ++c) threads.emplace_back([&, c] { statuses[c] = body(c); });
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& status : statuses) CHORUS_RETURN_IF_ERROR(status);
  return absl::OkStatus();
}

TEST_CASE("soak: thousands of mixed collectives on two communicators at once") {
  const absl::StatusOr<int64_t> seconds = GetEnvInt("CHORUS_SOAK_SECONDS", 45, 1, 86400);
  REQUIRE(seconds.ok());
  MemoryStore store;
  ProcessUsage start;
  ProcessUsage end;
  std::vector<int64_t> calls(kRanks * kComms, 0);
  const std::vector<absl::Status> statuses = RunRanksAsThreads(
      kRanks,
      [&](int rank) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                                MakeDevice(TransportKind::kTcp, rank));
        std::vector<std::unique_ptr<Communicator>> comms(kComms);
        for (int c = 0; c < kComms; ++c) {
          CHORUS_ASSIGN_OR_RETURN(comms[c], Communicator::Create(store, absl::StrCat("soak/", c),
                                                                 *device, rank, kRanks));
        }
        // Warm-up: every kind, type and size once, then the first rounds of the mix, so that
        // connections, worker threads, scratch buffers and the allocator's arenas have grown to
        // their working size before the first measurement.
        std::vector<int64_t> index(kComms, 0);
        CHORUS_RETURN_IF_ERROR(OnEachComm([&](int c) {
          CHORUS_RETURN_IF_ERROR(RunSoakWarmup(*comms[c], /*stream=*/c));
          return Drive(*comms[c], c, std::chrono::steady_clock::time_point::max(),
                       kWarmupCallsPerComm, &index[c]);
        }));
        CHORUS_RETURN_IF_ERROR(comms[0]->Barrier());
        if (rank == 0) start = ProcessUsage::Now();
        CHORUS_RETURN_IF_ERROR(comms[0]->Barrier());
        const auto stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(*seconds);
        CHORUS_RETURN_IF_ERROR(OnEachComm([&](int c) {
          CHORUS_RETURN_IF_ERROR(Drive(*comms[c], c, stop_at, kMaxCallsPerComm, &index[c]));
          calls[rank * kComms + c] = index[c] - kWarmupCallsPerComm;
          return absl::OkStatus();
        }));
        CHORUS_RETURN_IF_ERROR(comms[0]->Barrier());
        if (rank == 0) end = ProcessUsage::Now();
        return comms[0]->Barrier();
      },
      absl::Seconds(*seconds) + absl::Minutes(5));
  for (int rank = 0; rank < kRanks; ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].ToString());
    CHECK(statuses[rank].ok());
  }
  const int64_t per_rank = calls[0] + calls[1];  // rank 0's, after the warm-up
  WARN("soak " << *seconds << " s: " << per_rank << " collectives per rank (" << kComms
               << " communicators x " << kRanks << " ranks); RSS " << start.rss_bytes / 1024
               << " -> " << end.rss_bytes / 1024 << " KiB, heap in use " << start.heap_bytes / 1024
               << " -> " << end.heap_bytes / 1024 << " KiB, open fds " << start.open_fds << " -> "
               << end.open_fds);
  CHECK(per_rank >= 1000);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // A sanitizer's allocator (quarantine, shadow memory) makes RSS say nothing about ours.
  CHECK(end.rss_bytes - start.rss_bytes < kRssBoundBytes);
#endif
  CHECK(end.open_fds == start.open_fds);
}

}  // namespace
}  // namespace chorus::testing
