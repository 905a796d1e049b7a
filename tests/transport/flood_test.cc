// Hostile connections during real collectives: three ranks (threads, each with its own TCP
// device on loopback) run allreduces of 4 MiB while flooder threads open connections to their
// listening ports and send what an attacker or a confused program would: nothing, random bytes,
// part of a handshake, forged handshakes, a frame header instead of a handshake. The flood
// starts before the ranks connect to each other (connections are lazy) and lasts until the
// collectives end. The collectives must finish with exact results, and every stray connection
// must be refused, closed and logged without reaching the mesh.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <iostream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "chorus/collectives/communicator.h"
#include "chorus/core/deadline.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/memory_store.h"
#include "chorus/transport/tcp/tcp_device.h"
#include "tests/harness/multirank.h"
#include "tests/transport/captured_log.h"
#include "tests/transport/hostile_peer.h"
#include "tests/transport/stray_connections.h"

namespace chorus::testing {
namespace {

constexpr int kRanks = 3;
constexpr int kAllReduces = 40;
constexpr size_t kElements = (size_t{4} << 20) / sizeof(float);
constexpr int kFlooders = 16;
// Bounds the flood whatever the collectives do: at most this many connections per flooder.
constexpr int kMaxStraysPerFlooder = 250;
// The ranks start their collectives (and so their connections) only once the flood is on.
constexpr int kStraysBeforeCollectives = 20;
// Short, so silent connections are cut off quickly; still ample for a real dial on loopback.
constexpr absl::Duration kHandshakeTimeout = absl::Seconds(1);
// How long a flooder waits for a rank to close a stray it must refuse.
constexpr absl::Duration kRefusalWait = absl::Seconds(4);
constexpr char kCommName[] = "flood";

// The flooder threads and what they saw. Counters are read by the rank threads, the rest by
// the test thread after Join().
class Flood {
 public:
  explicit Flood(Store& store) : store_(store) {}

  void Start() {
    for (int flooder = 0; flooder < kFlooders; ++flooder) {
      threads_.emplace_back([this, flooder] { Run(flooder); });
    }
  }

  // Called by each rank when its collectives are done; the flood stops after the last.
  void RankFinished() { ranks_finished_.fetch_add(1); }

  // Called by each rank before its collectives.
  absl::Status WaitUntilUnderWay() {
    const Deadline deadline = Deadline::After(absl::Seconds(10));
    while (strays_.load() < kStraysBeforeCollectives) {
      if (deadline.Expired()) return InternalError("the flood never got under way");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return absl::OkStatus();
  }

  // Called by each rank before it destroys its mesh, so that no stray connection finds the
  // port closed (a refusal by the kernel, not by the transport).
  void WaitUntilOver() { over_.WaitForNotificationWithTimeout(absl::Seconds(20)); }

  void Join() {
    for (std::thread& thread : threads_) thread.join();
  }

  int strays() const { return strays_.load(); }
  int strays_during_collectives() const { return strays_during_collectives_.load(); }
  const std::vector<std::string>& problems() const { return problems_; }
  // Attacker ports of the connections the ranks must have logged as refused.
  const std::vector<int>& refused_ports() const { return refused_ports_; }

 private:
  void Run(int flooder) {
    absl::StatusOr<PublishedRanks> published = ReadPublishedRanks(store_, kCommName, kRanks);
    if (!published.ok()) {
      Report(absl::StrCat("flooder ", flooder, ": ", published.status().ToString()), -1);
    }
    std::mt19937_64 random(flooder);
    for (int made = 0;
         published.ok() && made < kMaxStraysPerFlooder && ranks_finished_.load() < kRanks; ++made) {
      const int target = static_cast<int>(random() % kRanks);
      const Stray stray = MakeStray(random, *published, target);
      const bool during_collectives = strays_.fetch_add(1) >= kStraysBeforeCollectives;
      const AttackOutcome outcome =
          Attack(published->addresses[target], stray.bytes,
                 stray.wait_for_close ? kRefusalWait : absl::ZeroDuration());
      if (during_collectives && ranks_finished_.load() < kRanks) {
        strays_during_collectives_.fetch_add(1);
      }
      if (!stray.wait_for_close) continue;
      const std::string problem = RefusalProblem(stray, outcome);
      Report(problem.empty() ? "" : absl::StrCat("rank ", target, ", ", stray.kind, ": ", problem),
             outcome.local_port);
    }
    if (running_.fetch_sub(1) == 1) over_.Notify();
  }

  void Report(std::string problem, int refused_port) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!problem.empty()) problems_.push_back(std::move(problem));
    if (refused_port > 0) refused_ports_.push_back(refused_port);
  }

  Store& store_;
  std::vector<std::thread> threads_;
  std::atomic<int> running_{kFlooders};
  std::atomic<int> ranks_finished_{0};
  std::atomic<int> strays_{0};
  std::atomic<int> strays_during_collectives_{0};
  absl::Notification over_;
  std::mutex mutex_;
  std::vector<std::string> problems_;
  std::vector<int> refused_ports_;
};

// kAllReduces float sums of 4 MiB with integer-valued inputs, so the sums are exact.
absl::Status AllReduceAndCheck(Communicator& comm, int rank) {
  std::vector<float> input(kElements);
  std::vector<float> output(kElements);
  constexpr int kRankWeightSum = kRanks * (kRanks + 1) / 2;  // sum of rank + 1 over the ranks
  for (int round = 0; round < kAllReduces; ++round) {
    for (size_t i = 0; i < kElements; ++i) input[i] = float((rank + 1) * ((i + round) % 251));
    CHORUS_RETURN_IF_ERROR(
        comm.AllReduce(input.data(), output.data(), kElements, DataType::kFloat32, ReduceOp::kSum));
    for (size_t i = 0; i < kElements; ++i) {
      const float expected = float(kRankWeightSum * ((i + round) % 251));
      if (output[i] != expected) {
        return InternalError(absl::StrCat("allreduce ", round, ": element ", i, " is ", output[i],
                                          ", expected ", expected));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status RunRank(int rank, Store& store, Flood& flood) {
  // Declared before the cleanup, so destroyed after it: the port stays open until the flood
  // is over, and every rank reports its end, whatever fails.
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> comm;
  absl::Cleanup end_of_rank = [&flood] {
    flood.RankFinished();
    flood.WaitUntilOver();
  };
  tcp::TcpDeviceOptions options;
  options.address = "127.0.0.1";
  options.handshake_timeout = kHandshakeTimeout;
  CHORUS_ASSIGN_OR_RETURN(device, tcp::CreateTcpDevice(options));
  CommunicatorOptions comm_options;
  comm_options.timeout = absl::Seconds(20);
  CHORUS_ASSIGN_OR_RETURN(
      comm, Communicator::Create(store, kCommName, *device, rank, kRanks, comm_options));
  CHORUS_RETURN_IF_ERROR(flood.WaitUntilUnderWay());
  return AllReduceAndCheck(*comm, rank);
}

TEST_CASE("allreduces over TCP finish exactly while stray connections flood every rank") {
  CapturedLog log;
  MemoryStore store;
  Flood flood(store);
  const auto start = std::chrono::steady_clock::now();
  flood.Start();
  const std::vector<absl::Status> statuses = RunRanksAsThreads(
      kRanks, [&](int rank) { return RunRank(rank, store, flood); }, absl::Seconds(60));
  flood.Join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << flood.strays() << " stray connections (" << flood.strays_during_collectives()
            << " during the collectives), " << kAllReduces << " allreduces of 4 MiB on " << kRanks
            << " ranks, " << seconds << " s\n";

  for (int rank = 0; rank < kRanks; ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].ToString());
    CHECK(statuses[rank].ok());
  }
  INFO(absl::StrJoin(flood.problems(), "\n"));
  CHECK(flood.problems().empty());
  // The flood overlapped the collectives, not just their setup.
  CHECK(flood.strays_during_collectives() >= kFlooders);
  const std::string text = log.Read();
  for (int port : flood.refused_ports()) {
    INFO("stray connection from port " << port);
    CHECK(absl::StrContains(text, absl::StrCat("refused connection from 127.0.0.1:", port)));
  }
}

}  // namespace
}  // namespace chorus::testing
