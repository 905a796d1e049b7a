// The verbs transport on real RDMA devices: in CI, the two Soft-RoCE devices of the QEMU guest
// that tools/verbs_check.sh boots (CHORUS_TEST_IB_DEVICES=rxe0,rxe1; rank r opens device r mod
// 2, so pairs of ranks talk across the guest's veth link). Without devices every case reports
// itself skipped. The transport conformance suite runs over verbs in the same guest
// (tests/transport:conformance_test with CHORUS_TEST_TRANSPORTS=ibverbs).
#include "chorus/transport/ibverbs/verbs_device.h"

#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/host_identity.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/file_store.h"
#include "tests/collectives/cases.h"
#include "tests/collectives/world.h"
#include "tests/harness/multirank.h"
#include "tests/transport/captured_log.h"
#include "tests/transport/scenario.h"
#include "tests/transport/scoped_env.h"
#include "tests/transport/transport_factory.h"

namespace chorus::testing {
namespace {

constexpr absl::Duration kWait = absl::Seconds(60);

bool SkipWithoutDevices() {
  if (!TestVerbsDevices().empty()) return false;
  WARN(
      "SKIPPED: no RDMA device to test on (CHORUS_TEST_IB_DEVICES is unset; "
      "tools/verbs_check.sh runs these tests on Soft-RoCE in a QEMU guest)");
  return true;
}

void RunVerbsMatrix(int ranks) {
  if (SkipWithoutDevices()) return;
  Matrix matrix;
  // Every collective and algorithm; a few types (the reduction kernels are the host's, tested
  // elsewhere) and counts from empty through eager slots to RDMA-read messages (40000 int64:
  // 80 KB blocks at 4 ranks, beyond the 8 KiB slots).
  matrix.types = {DataType::kFloat32, DataType::kInt64, DataType::kBFloat16};
  matrix.counts = {0, 1, 7, 1000, 40000};
  std::vector<Case> cases = BuildCases(matrix, ranks);
  // Messages of several 1 MiB reads, in one type: under emulation (the guest without KVM)
  // Soft-RoCE moves about 15 MB/s, so every type at this size would take minutes.
  Matrix multi_read = matrix;
  multi_read.types = {DataType::kFloat32};
  multi_read.counts = {300000};
  for (Case& extra : BuildCases(multi_read, ranks)) cases.push_back(std::move(extra));
  const absl::Status status = RunOnProcesses(
      TransportKind::kIbverbs, ranks, [&](Communicator& comm) { return RunCases(comm, cases); },
      absl::Minutes(15));
  INFO(cases.size() << " cases on " << ranks << " processes: " << status.ToString());
  CHECK(status.ok());
}

TEST_CASE("collectives matrix over verbs, 2 processes", "[matrix]") { RunVerbsMatrix(2); }
TEST_CASE("collectives matrix over verbs, 3 processes", "[matrix]") { RunVerbsMatrix(3); }
TEST_CASE("collectives matrix over verbs, 4 processes", "[matrix]") { RunVerbsMatrix(4); }

// Every one of `ranks` processes fails to create its mesh, with `kind` and a message naming
// each of `named`; `prepare` runs first in each (to set its environment).
void ExpectMeshRefused(int ranks, ErrorKind kind, const std::vector<std::string>& named,
                       const std::function<void(int rank)>& prepare) {
  TempDir dir;
  RankProcesses processes(ranks, [&](int rank) -> absl::Status {
    prepare(rank);
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store, FileStore::Open(dir.path()));
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, VerbsTransport().create_device(rank));
    const absl::StatusOr<std::unique_ptr<Mesh>> mesh =
        device->CreateMesh(*store, rank, ranks, MeshOptions{}, Deadline::After(kWait));
    if (mesh.ok()) return InternalError("the mesh was created");
    bool names_all = true;
    for (const std::string& text : named) {
      names_all = names_all && absl::StrContains(mesh.status().message(), text);
    }
    if (GetErrorKind(mesh.status()) != kind || !names_all) {
      return InternalError("not the error expected: " + mesh.status().ToString());
    }
    return absl::OkStatus();
  });
  for (const ProcessOutcome& outcome : processes.Wait(absl::Minutes(2))) {
    INFO(outcome.Describe());
    CHECK(outcome.ok());
  }
}

TEST_CASE("queue pairs that need more than the largest completion queue are refused, saying so",
          "[errors]") {
  if (SkipWithoutDevices()) return;
  // 4096 slots a peer: four peers' queue pairs could have more completions outstanding than
  // the device's largest completion queue holds (Soft-RoCE: 32767), which would lose some.
  ExpectMeshRefused(5, ErrorKind::kInvalidArgument, {"completion queue", "CHORUS_IB_SLOTS"},
                    [](int) {
                      setenv("CHORUS_IB_SLOTS", "4096", 1);
                      setenv("CHORUS_IB_EAGER_BYTES", "256", 1);
                    });
}

// Runs `body` on two verbs ranks as processes.
void RunPair(const ScenarioBody& body) {
  const std::vector<absl::Status> statuses =
      RunScenarioOnce(VerbsTransport(), RankMode::kProcesses, 2, body);
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].ToString());
    CHECK(statuses[rank].ok());
  }
}

TEST_CASE("a buffer freed and mapped again at the same address is sent from its new pages",
          "[registration]") {
  if (SkipWithoutDevices()) return;
  RunPair([](RankEnv& env) -> absl::Status {
    constexpr size_t kBytes = 4 << 20;  // read by RDMA from a cached registration
    constexpr int kRounds = 4;
    CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(1 - env.rank));
    int same_address = 0;
    void* previous = nullptr;
    for (int round = 0; round < kRounds; ++round) {
      if (env.rank == 0) {
        // A fresh mapping each round, at the address the last one had when the kernel allows:
        // a registration cached from the old pages must not be used for the new ones.
        void* hint = previous;
        void* data = mmap(hint, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        SCENARIO_EXPECT(data != MAP_FAILED, "mmap");
        if (data == previous) ++same_address;
        const std::vector<uint8_t> pattern = Pattern(100 + round, kBytes);
        std::memcpy(data, pattern.data(), kBytes);
        RequestPtr send = connection->Send(1, data, kBytes);
        CHORUS_RETURN_IF_ERROR(send->Wait(Deadline::After(kWait)));
        munmap(data, kBytes);
        previous = data;
      } else {
        std::vector<uint8_t> buffer(kBytes);
        RequestPtr recv = connection->Recv(1, buffer.data(), buffer.size());
        CHORUS_RETURN_IF_ERROR(recv->Wait(Deadline::After(kWait)));
        const std::string wrong = CheckPattern(buffer.data(), kBytes, 100 + round);
        SCENARIO_EXPECT(wrong.empty(), "round ", round, ": ", wrong);
      }
    }
    if (env.rank == 0) {
      SCENARIO_EXPECT(same_address > 0,
                      "the kernel never mapped the same address again, so "
                      "the case proved nothing");
    }
    return absl::OkStatus();
  });
}

TEST_CASE("a slow receiver holds the sender back without losing or reordering messages", "[flow]") {
  if (SkipWithoutDevices()) return;
  RunPair([](RankEnv& env) -> absl::Status {
    // Far more messages than the peer has slots, some large enough to be read by RDMA, all
    // posted before the receiver posts anything.
    constexpr int kMessages = 600;
    auto size_of = [](int i) -> size_t { return i % 50 == 0 ? (256 << 10) + i : 16 + i % 900; };
    CHORUS_ASSIGN_OR_RETURN(Connection * connection, env.To(1 - env.rank));
    if (env.rank == 0) {
      std::vector<std::vector<uint8_t>> messages;
      std::vector<RequestPtr> sends;
      for (int i = 0; i < kMessages; ++i) messages.push_back(Pattern(i, size_of(i)));
      for (int i = 0; i < kMessages; ++i) {
        sends.push_back(connection->Send(5, messages[i].data(), messages[i].size()));
      }
      return WaitAll(sends, Deadline::After(kWait));
    }
    std::this_thread::sleep_for(std::chrono::seconds(2));
    for (int i = 0; i < kMessages; ++i) {
      std::vector<uint8_t> buffer(size_of(i));
      RequestPtr recv = connection->Recv(5, buffer.data(), buffer.size());
      CHORUS_RETURN_IF_ERROR(recv->Wait(Deadline::After(kWait)));
      SCENARIO_EXPECT(recv->bytes() == buffer.size(), "message ", i, " has ", recv->bytes());
      const std::string wrong = CheckPattern(buffer.data(), buffer.size(), i);
      SCENARIO_EXPECT(wrong.empty(), "message ", i, ": ", wrong);
      // A receiver slower than the sender the whole way, not only at the start.
      if (i % 100 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return absl::OkStatus();
  });
}

int64_t MonotonicNs() {
  // steady_clock is CLOCK_MONOTONIC: one clock for every process of the machine.
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One end of a two-rank verbs mesh opened by hand (for cases that must act on the process
// before its device opens, or kill it).
struct PairEnd {
  std::unique_ptr<FileStore> store;
  std::unique_ptr<Device> device;
  std::unique_ptr<Mesh> mesh;  // destroyed before the device
  Connection* peer = nullptr;
};

absl::StatusOr<PairEnd> OpenPairEnd(const std::string& store_dir, int rank) {
  PairEnd end;
  CHORUS_ASSIGN_OR_RETURN(end.store, FileStore::Open(store_dir));
  CHORUS_ASSIGN_OR_RETURN(end.device, VerbsTransport().create_device(rank));
  CHORUS_ASSIGN_OR_RETURN(
      end.mesh, end.device->CreateMesh(*end.store, rank, 2, MeshOptions{}, Deadline::After(kWait)));
  CHORUS_ASSIGN_OR_RETURN(end.peer, end.mesh->GetConnection(1 - rank));
  return end;
}

// Runs `body` in a child process in a new pid namespace, as a rank on another host looks to
// this one: its host identity differs, so peers cannot watch its pid and must find its death
// through the queue pair. The child dies with this process (which is the rank the test kills).
absl::Status RunInOwnPidNamespace(int rank, const std::function<absl::Status()>& body) {
  const std::string outer_namespace = NamespaceInode("pid");
  if (unshare(CLONE_NEWPID) != 0) {
    return InternalError(absl::StrCat("unshare(CLONE_NEWPID): ", std::strerror(errno)));
  }
  // The one process forked now is the new namespace's first.
  const std::vector<ProcessOutcome> outcomes = RunRanksAsProcesses(
      1,
      [&](int) -> absl::Status {
        SetThreadLogRank(rank);
        if (NamespaceInode("pid") == outer_namespace ||
            !absl::EndsWith(LocalHostIdentity(), "/" + NamespaceInode("pid"))) {
          // The identity was computed before the fork: the peers would take this rank for a
          // process of their own host, and the case would test the pid watch instead.
          return InternalError(absl::StrCat("the new pid namespace is not in the host identity ",
                                            LocalHostIdentity()));
        }
        return body();
      },
      absl::Minutes(5));
  if (outcomes.front().ok()) return absl::OkStatus();
  return InternalError("the rank in its own pid namespace failed: " + outcomes.front().Describe());
}

// Rank `victim` of two is SIGKILLed while the other moves 64 MiB messages to or from it; the
// survivor must fail soon after the kill, naming the victim. On hardware the queue pair's own
// retries fail the transfer within about 0.55 s; Soft-RoCE never fails it, and the liveness
// backstop (transport-ibverbs.md) does: 0.54 s for a peer on another host, while the pid watch
// decides at once for a process of this host.
void ExpectPromptFailure(bool survivor_sends, bool victim_on_other_host) {
  TempDir dir;
  constexpr int kVictim = 1;
  const std::string noticed_file = dir.path() + "/noticed";
  RankProcesses processes(2, [&](int rank) -> absl::Status {
    auto transfer = [&]() -> absl::Status {
      CHORUS_ASSIGN_OR_RETURN(PairEnd end, OpenPairEnd(dir.path(), rank));
      std::vector<uint8_t> buffer(64 << 20, 7);
      const bool sending = (rank == kVictim) != survivor_sends;
      absl::Status status;
      for (int i = 0; i < 100000 && status.ok(); ++i) {
        RequestPtr request = sending ? end.peer->Send(3, buffer.data(), buffer.size())
                                     : end.peer->Recv(3, buffer.data(), buffer.size());
        status = request->Wait(Deadline::After(absl::Seconds(30)));
      }
      return status;
    };
    if (rank == kVictim) {  // killed before either returns
      return victim_on_other_host ? RunInOwnPidNamespace(rank, transfer) : transfer();
    }
    const absl::Status status = transfer();
    std::ofstream(noticed_file) << MonotonicNs();
    if (status.ok()) return InternalError("the loop ended without an error");
    if (GetErrorKind(status) != ErrorKind::kPeerUnavailable) {
      return InternalError("expected kPeerUnavailable, got " + status.ToString());
    }
    if (!absl::StrContains(status.message(), absl::StrCat("rank ", kVictim))) {
      return InternalError("the error does not name the dead rank: " + status.ToString());
    }
    return absl::OkStatus();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  const int64_t killed = MonotonicNs();
  processes.Signal(kVictim, SIGKILL);
  for (const ProcessOutcome& outcome : processes.Wait(absl::Minutes(1))) {
    INFO(outcome.Describe());
    if (outcome.rank == kVictim) {
      CHECK(outcome.term_signal == SIGKILL);
    } else {
      CHECK(outcome.ok());
    }
  }
  int64_t noticed = 0;
  std::ifstream(noticed_file) >> noticed;
  const double seconds = static_cast<double>(noticed - killed) / 1e9;
  INFO("the survivor noticed the death " << seconds << " s after the kill");
  CHECK(noticed > killed);
  CHECK(seconds < 2.0);
}

TEST_CASE("a peer killed mid-transfer fails the sender promptly, naming it", "[failures]") {
  if (SkipWithoutDevices()) return;
  ExpectPromptFailure(/*survivor_sends=*/true, /*victim_on_other_host=*/false);
}

TEST_CASE("a peer killed mid-transfer fails the receiver promptly, naming it", "[failures]") {
  if (SkipWithoutDevices()) return;
  ExpectPromptFailure(/*survivor_sends=*/false, /*victim_on_other_host=*/false);
}

TEST_CASE("a peer on another host killed mid-transfer fails the sender promptly, naming it",
          "[failures]") {
  if (SkipWithoutDevices()) return;
  ExpectPromptFailure(/*survivor_sends=*/true, /*victim_on_other_host=*/true);
}

TEST_CASE("a peer on another host killed mid-transfer fails the receiver promptly, naming it",
          "[failures]") {
  if (SkipWithoutDevices()) return;
  ExpectPromptFailure(/*survivor_sends=*/false, /*victim_on_other_host=*/true);
}

// Takes CAP_IPC_LOCK out of this process's effective capabilities (root ignores the
// locked-memory limit with it) and limits locked memory to `bytes`.
absl::Status LimitLockedMemory(size_t bytes) {
  const rlimit limit{bytes, bytes};
  if (setrlimit(RLIMIT_MEMLOCK, &limit) != 0) {
    return InternalError(absl::StrCat("setrlimit(RLIMIT_MEMLOCK): ", std::strerror(errno)));
  }
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return InternalError("capget");
  data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective &= ~CAP_TO_MASK(CAP_IPC_LOCK);
  if (syscall(SYS_capset, &header, data) != 0) return InternalError("capset");
  return absl::OkStatus();
}

TEST_CASE(
    "a rank that cannot register its buffers sends by copy and receives through bounce "
    "buffers",
    "[registration]") {
  if (SkipWithoutDevices()) return;
  TempDir dir;
  constexpr int kLimited = 1;
  constexpr size_t kBytes = 32 << 20;  // twice the limited rank's locked memory
  RankProcesses processes(2, [&](int rank) -> absl::Status {
    // The fallbacks are logged as warnings: this rank's log shows they happened.
    std::optional<CapturedLog> log;
    if (rank == kLimited) {
      // Its device's own memory (slots, bounce buffers) fits; no user buffer here does.
      CHORUS_RETURN_IF_ERROR(LimitLockedMemory(kBytes / 2));
      log.emplace("warn");
    }
    CHORUS_ASSIGN_OR_RETURN(PairEnd end, OpenPairEnd(dir.path(), rank));
    // Both directions at once, each message large enough to be read by RDMA when registered.
    const std::vector<uint8_t> outgoing = Pattern(10 + rank, kBytes);
    std::vector<uint8_t> incoming(kBytes);
    RequestPtr recv = end.peer->Recv(4, incoming.data(), incoming.size());
    RequestPtr send = end.peer->Send(4, outgoing.data(), outgoing.size());
    CHORUS_RETURN_IF_ERROR(WaitAll({send, recv}, Deadline::After(kWait)));
    const std::string wrong = CheckPattern(incoming.data(), kBytes, 10 + (1 - rank));
    SCENARIO_EXPECT(wrong.empty(), "received from rank ", 1 - rank, ": ", wrong);
    if (rank == kLimited) {
      const std::string logged = log->Read();
      SCENARIO_EXPECT(absl::StrContains(logged, "by copy") &&
                          absl::StrContains(logged, "through bounce buffers"),
                      "the log does not show both fallbacks: ", logged);
    }
    return absl::OkStatus();
  });
  for (const ProcessOutcome& outcome : processes.Wait(absl::Minutes(2))) {
    INFO(outcome.Describe());
    CHECK(outcome.ok());
  }
}

absl::Status OpenWith(const std::string& variable, const std::string& value) {
  ScopedEnv env(variable.c_str(), value.c_str());
  CHORUS_ASSIGN_OR_RETURN(ibverbs::VerbsDeviceOptions options,
                          ibverbs::VerbsDeviceOptions::FromEnv());
  if (variable != "CHORUS_IB_DEVICE") options.device = TestVerbsDevices().front();
  return ibverbs::CreateVerbsDevice(options).status();
}

TEST_CASE("a device, GID index or MTU that does not exist is refused, naming what does",
          "[errors]") {
  if (SkipWithoutDevices()) return;
  const std::string present = TestVerbsDevices().front();
  {
    const absl::Status status = OpenWith("CHORUS_IB_DEVICE", "mlx5_99");
    INFO(status.ToString());
    CHECK(GetErrorKind(status) == ErrorKind::kInvalidArgument);
    CHECK(absl::StrContains(status.message(), "mlx5_99"));
    CHECK(absl::StrContains(status.message(), present));
  }
  {
    const absl::Status status = OpenWith("CHORUS_IB_GID_INDEX", "77");
    INFO(status.ToString());
    CHECK(GetErrorKind(status) == ErrorKind::kInvalidArgument);
    CHECK(absl::StrContains(status.message(), "CHORUS_IB_GID_INDEX=77"));
    CHECK(absl::StrContains(status.message(), "RoCE v2"));  // lists the GIDs there are
  }
  {
    // The guest's links have MTU 1500, so the ports' active MTU is 1024.
    const absl::Status status = OpenWith("CHORUS_IB_MTU", "4096");
    INFO(status.ToString());
    CHECK(GetErrorKind(status) == ErrorKind::kInvalidArgument);
    CHECK(absl::StrContains(status.message(), "exceeds the active MTU"));
    CHECK(absl::StrContains(status.message(), "1024"));
  }
  {
    const absl::Status status = OpenWith("CHORUS_IB_PORT", "9");
    INFO(status.ToString());
    CHECK(GetErrorKind(status) == ErrorKind::kInvalidArgument);
    CHECK(absl::StrContains(status.message(), "CHORUS_IB_PORT=9"));
  }
}

TEST_CASE("ranks that disagree on the eager slots fail to connect, naming the setting",
          "[errors]") {
  if (SkipWithoutDevices()) return;
  ExpectMeshRefused(2, ErrorKind::kMismatch, {"CHORUS_IB_SLOTS"},
                    [](int rank) { setenv("CHORUS_IB_SLOTS", rank == 0 ? "16" : "32", 1); });
}

}  // namespace
}  // namespace chorus::testing
