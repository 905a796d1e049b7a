// The shm transport between forked processes (FileStore rendezvous): cross-memory attach and
// staging across address spaces, oversubscription, and ranks killed mid-transfer.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "chorus/core/status.h"
#include "tests/harness/multirank.h"
#include "tests/shm/shm_test_util.h"

namespace chorus::shm_testing {
namespace {

using shm::SingleCopyMode;

constexpr size_t kHuge = kHugeMessage;

int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A page shared by the test process and its forked ranks (mapped before the fork).
template <typename T>
class SharedBlock {
 public:
  SharedBlock() {
    void* memory = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
    REQUIRE(memory != MAP_FAILED);
    value_ = new (memory) T();
  }
  ~SharedBlock() { munmap(value_, sizeof(T)); }
  T* operator->() const { return value_; }

 private:
  T* value_;
};

std::string Describe(const std::vector<testing::ProcessOutcome>& outcomes) {
  std::string text;
  for (const auto& outcome : outcomes) absl::StrAppend(&text, outcome.Describe(), "\n");
  return text;
}

TEST_CASE("processes exchange small and 64 MiB messages both ways") {
  const SingleCopyMode mode =
      GENERATE(SingleCopyMode::kAuto, SingleCopyMode::kCma, SingleCopyMode::kStaging);
  INFO("single copy " << shm::SingleCopyModeName(mode));
  testing::TempDir store_dir;
  const auto outcomes = testing::RunRanksAsProcesses(
      2,
      [&](int rank) {
        return RunMeshInProcess(rank, 2, OptionsFor(mode), store_dir.path(),
                                [&](Mesh& mesh) -> absl::Status {
          auto connection = mesh.GetConnection(1 - rank);
          SHM_OK(connection.status());
          Connection& peer = **connection;
          const std::vector<char> out = Pattern(kHuge, rank);
          std::vector<char> in(kHuge);
          for (int round = 0; round < 3; ++round) {
            // A small message, a zero-length one and a huge one each way.
            uint64_t small_in = 0;
            const uint64_t small_out = 1000 * rank + round;
            std::vector<RequestPtr> requests = {
                peer.Recv(1, &small_in, sizeof(small_in)), peer.Recv(2, nullptr, 0),
                peer.Recv(3, in.data(), in.size()),        peer.Send(1, &small_out, 8),
                peer.Send(2, nullptr, 0),                  peer.Send(3, out.data(), out.size())};
            SHM_OK(WaitAll(requests, Generous()));
            SHM_EXPECT(small_in == static_cast<uint64_t>(1000 * (1 - rank) + round));
            SHM_EXPECT(requests[2]->bytes() == kHuge);
            SHM_OK(ExpectPattern(in.data(), kHuge, 1 - rank));
          }
          return absl::OkStatus();
        });
      },
      absl::Seconds(60));
  for (const auto& outcome : outcomes) {
    INFO(outcome.Describe());
    CHECK(outcome.ok());
  }
}

TEST_CASE("eight processes on two cores: a ring exchange progresses when oversubscribed") {
  constexpr int kRanks = 8;
  constexpr int kRounds = 150;
  testing::TempDir store_dir;
  const auto outcomes = testing::RunRanksAsProcesses(
      kRanks,
      [&](int rank) {
        return RunMeshInProcess(rank, kRanks, ShmOptions{}, store_dir.path(),
                                [&](Mesh& mesh) -> absl::Status {
          auto to = mesh.GetConnection((rank + 1) % kRanks);
          auto from = mesh.GetConnection((rank + kRanks - 1) % kRanks);
          SHM_OK(to.status());
          SHM_OK(from.status());
          int64_t value = rank;
          for (int round = 0; round < kRounds; ++round) {
            int64_t incoming = -1;
            RequestPtr recv = (*from)->Recv(round, &incoming, sizeof(incoming));
            RequestPtr send = (*to)->Send(round, &value, sizeof(value));
            SHM_OK(WaitAll({send, recv}, Generous()));
            value = incoming;
          }
          SHM_EXPECT(value == ((rank - kRounds) % kRanks + kRanks) % kRanks, value);
          return absl::OkStatus();
        });
      },
      absl::Seconds(60));
  for (const auto& outcome : outcomes) {
    INFO(outcome.Describe());
    CHECK(outcome.ok());
  }
}

// Rank 0 streams 64 MiB messages to rank 1, rank 2 waits for a message from rank 1; the test
// kills rank 1 in the middle of a transfer. Both survivors must fail within 1 s, naming rank 1.
struct DeathScene {
  std::atomic<int> transfers_done{0};
  std::atomic<int64_t> killed_at_ns{0};
};

absl::Status ExpectPromptDeathOfRank1(const absl::Status& status, const DeathScene& scene) {
  const int64_t detected = MonotonicNanos();
  SHM_EXPECT(GetErrorKind(status) == ErrorKind::kPeerUnavailable, status.ToString());
  SHM_EXPECT(ErrorPeerRank(status) == 1, status.ToString());
  SHM_EXPECT(absl::StrContains(status.message(), "rank 1"), status.message());
  const int64_t killed = scene.killed_at_ns.load();
  SHM_EXPECT(killed != 0, "failed before the kill: ", status.ToString());
  const double seconds = (detected - killed) / 1e9;
  SHM_EXPECT(seconds < 1.0, "detected ", seconds, " s after the kill");
  return absl::OkStatus();
}

TEST_CASE("a rank killed mid-transfer fails the survivors within 1 s and leaves nothing behind") {
  const SingleCopyMode mode = GENERATE(SingleCopyMode::kAuto, SingleCopyMode::kStaging);
  INFO("single copy " << shm::SingleCopyModeName(mode));
  testing::TempDir store_dir;
  SharedBlock<DeathScene> scene;
  testing::RankProcesses ranks(3, [&](int rank) -> absl::Status {
    SHM_OK(RunMeshInProcess(rank, 3, OptionsFor(mode), store_dir.path(),
                            [&](Mesh& mesh) -> absl::Status {
      if (rank == 1) {
        auto from0 = mesh.GetConnection(0);
        auto to2 = mesh.GetConnection(2);  // rank 2 waits on this connection
        SHM_OK(from0.status());
        SHM_OK(to2.status());
        std::vector<char> into(kHuge);
        for (int i = 0; i < 1000; ++i) {
          SHM_OK((*from0)->Recv(1, into.data(), into.size())->Wait(Generous()));
          scene->transfers_done.fetch_add(1);
        }
        return absl::InternalError("rank 1 was not killed");
      }
      auto to1 = mesh.GetConnection(1);
      SHM_OK(to1.status());
      absl::Status status;
      if (rank == 0) {
        const std::vector<char> data = Pattern(kHuge, 0);
        for (int i = 0; i < 1000 && status.ok(); ++i) {
          status = (*to1)->Send(1, data.data(), data.size())->Wait(Generous());
        }
      } else {
        char byte;
        status = (*to1)->Recv(9, &byte, 1)->Wait(Generous());
      }
      SHM_OK(ExpectPromptDeathOfRank1(status, *scene.operator->()));
      // Later requests to the dead rank fail at once.
      RequestPtr later = (*to1)->Send(2, "x", 1);
      SHM_EXPECT(later->IsDone() && GetErrorKind(later->status()) == ErrorKind::kPeerUnavailable);
      return absl::OkStatus();
    }));
    // With the mesh gone, no inbox (ours or the peers') stays mapped in this process.
    const std::vector<std::string> mappings = InboxMappings();
    SHM_EXPECT(mappings.empty(), mappings.front());
    return absl::OkStatus();
  });
  const Deadline started = Generous();
  while (scene->transfers_done.load() < 2 && !started.Expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(scene->transfers_done.load() >= 2);
  // Land inside a transfer: a 64 MiB message takes several milliseconds.
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  scene->killed_at_ns.store(MonotonicNanos());
  ranks.Signal(1, SIGKILL);
  const auto outcomes = ranks.Wait(absl::Seconds(30));
  INFO(Describe(outcomes));
  CHECK(outcomes[0].ok());
  CHECK(outcomes[2].ok());
  CHECK(outcomes[1].term_signal == SIGKILL);
  // Segments are memfds: nothing can be left in /dev/shm, which this checks stays true.
  CHECK(ChorusShmFiles().empty());
}

// What the test process and its two ranks tell each other in the departure test below.
struct DepartureScene {
  std::atomic<int> receiver_ready{0};
  std::atomic<int> receiver_stopped{0};
  std::atomic<int> sender_reaped{0};
};

// Waits (bounded) until `flag` is set; false if it never was.
bool AwaitFlag(const std::atomic<int>& flag, const Deadline& deadline) {
  while (flag.load() == 0 && !deadline.Expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return flag.load() != 0;
}

// The state letter of process `pid` in /proc/<pid>/stat ('R', 'S', 'T', ...); 0 if gone.
char ProcessState(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return 0;
  const size_t name_end = line.rfind(')');
  return name_end != std::string::npos && name_end + 2 < line.size() ? line[name_end + 2] : 0;
}

TEST_CASE("messages from a rank that exited before its receiver attached back all arrive") {
  // The receiver is stopped while the sender attaches, completes its sends and exits, and
  // stays stopped until the sender is reaped: when it first connects back, its peer's process
  // is gone, not even a zombie. What the sender sent is whole in the receiver's inbox.
  constexpr int kMessages = 8;
  auto size_of = [](int i) -> size_t { return i * 97; };  // 0 B up to eager sizes
  testing::TempDir store_dir;
  SharedBlock<DepartureScene> scene;
  testing::RankProcesses ranks(2, [&](int rank) -> absl::Status {
    return RunMeshInProcess(
        rank, 2, ShmOptions{}, store_dir.path(), [&](Mesh& mesh) -> absl::Status {
          const Deadline deadline = Generous();
          if (rank == 0) {
            SHM_EXPECT(AwaitFlag(scene->receiver_stopped, deadline), "rank 1 was not stopped");
            auto to1 = mesh.GetConnection(1);
            SHM_OK(to1.status());
            std::vector<std::vector<char>> messages;
            std::vector<RequestPtr> sends;
            for (int i = 0; i < kMessages; ++i) messages.push_back(Pattern(size_of(i), i));
            for (const std::vector<char>& message : messages) {
              sends.push_back((*to1)->Send(1, message.data(), message.size()));
            }
            for (const RequestPtr& send : sends) SHM_OK(send->Wait(deadline));
            // Gone at once, nothing torn down, as a rank that crashes right after its sends.
            syscall(SYS_exit_group, 0);
          }
          scene->receiver_ready.store(1);
          SHM_EXPECT(AwaitFlag(scene->sender_reaped, deadline), "rank 0 was not reaped");
          auto from0 = mesh.GetConnection(0);
          SHM_OK(from0.status());
          for (int i = 0; i < kMessages; ++i) {
            std::vector<char> into(size_of(i) + 8);
            RequestPtr receive = (*from0)->Recv(1, into.data(), into.size());
            SHM_OK(receive->Wait(deadline));
            SHM_EXPECT(receive->bytes() == size_of(i), "message ", i, ": ", receive->bytes());
            SHM_OK(ExpectPattern(into.data(), size_of(i), i));
          }
          char byte;
          const absl::Status after = (*from0)->Recv(1, &byte, 1)->Wait(deadline);
          SHM_EXPECT(GetErrorKind(after) == ErrorKind::kPeerUnavailable, after.ToString());
          SHM_EXPECT(ErrorPeerRank(after) == 0 && absl::StrContains(after.message(), "rank 0"),
                     after.ToString());
          return absl::OkStatus();
        });
  });
  const Deadline deadline = Generous();
  REQUIRE(AwaitFlag(scene->receiver_ready, deadline));
  ranks.Signal(1, SIGSTOP);
  while (ProcessState(ranks.pid(1)) != 'T' && !deadline.Expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(ProcessState(ranks.pid(1)) == 'T');
  scene->receiver_stopped.store(1);
  const testing::ProcessOutcome sender = ranks.WaitFor(0, absl::Seconds(30));
  INFO(sender.Describe());
  CHECK(sender.ok());
  scene->sender_reaped.store(1);
  ranks.Signal(1, SIGCONT);
  const auto outcomes = ranks.Wait(absl::Seconds(30));
  INFO(Describe(outcomes));
  CHECK(outcomes[1].ok());
}

}  // namespace
}  // namespace chorus::shm_testing
