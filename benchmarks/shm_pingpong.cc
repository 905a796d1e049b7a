// shm_pingpong: latency and bandwidth of the shm transport between two processes.
//
//   bazel run -c opt //benchmarks:shm_pingpong -- [iterations] [megabytes] [messages]
//
// Forks two ranks that meet through a FileStore in a temporary directory, then measures
//   - the round trip of an 8-byte message (rank 0 sends, rank 1 echoes), `iterations` times;
//   - one-way bandwidth: rank 0 sends `messages` messages of `megabytes` MiB, rank 1 receives
//     them into one buffer and acknowledges the last;
// and prints them beside the machine's own memcpy bandwidth for the same size, so the result
// reads as a ratio. The single-copy path follows CHORUS_SHM_SINGLE_COPY. Bounded: every wait
// has a deadline and the children are killed if they outlive it.
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/env.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/file_store.h"
#include "chorus/transport/shm/shm_device.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

struct Settings {
  int iterations = 20000;
  size_t bytes = size_t{64} << 20;
  int messages = 20;
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

Deadline Soon() { return Deadline::After(absl::Seconds(30)); }

absl::Status RunRank(int rank, const std::string& store_dir, const Settings& settings) {
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store, FileStore::Open(store_dir));
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, shm::CreateShmDevice());
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Mesh> mesh,
                          device->CreateMesh(*store, rank, 2, MeshOptions{}, Soon()));
  CHORUS_ASSIGN_OR_RETURN(Connection * peer, mesh->GetConnection(1 - rank));

  // Latency: 8-byte ping-pong, with a warm-up.
  uint64_t word = 0;
  std::vector<double> samples;
  samples.reserve(settings.iterations);
  for (int i = -1000; i < settings.iterations; ++i) {
    const auto start = Clock::now();
    if (rank == 0) {
      CHORUS_RETURN_IF_ERROR(peer->Send(1, &word, 8)->Wait(Soon()));
      CHORUS_RETURN_IF_ERROR(peer->Recv(1, &word, 8)->Wait(Soon()));
    } else {
      CHORUS_RETURN_IF_ERROR(peer->Recv(1, &word, 8)->Wait(Soon()));
      ++word;
      CHORUS_RETURN_IF_ERROR(peer->Send(1, &word, 8)->Wait(Soon()));
    }
    if (i >= 0) samples.push_back(Seconds(Clock::now() - start) * 1e6);
  }
  if (rank == 0) {
    if (word != static_cast<uint64_t>(settings.iterations + 1000)) {
      return InternalError(absl::StrCat("ping-pong counter is ", word));
    }
    std::sort(samples.begin(), samples.end());
    double sum = 0;
    for (double s : samples) sum += s;
    std::printf("8-byte round trip over %d iterations: mean %.2f us, min %.2f, p50 %.2f, "
                "p99 %.2f us\n",
                settings.iterations, sum / samples.size(), samples.front(),
                samples[samples.size() / 2], samples[samples.size() * 99 / 100]);
  }

  // Bandwidth: `messages` one-way messages, timed from the first send to the last ack.
  std::vector<char> buffer(settings.bytes, static_cast<char>(rank + 1));
  for (int round = 0; round < 2; ++round) {  // round 0 warms up (page faults)
    const auto start = Clock::now();
    for (int i = 0; i < settings.messages; ++i) {
      if (rank == 0) {
        CHORUS_RETURN_IF_ERROR(peer->Send(2, buffer.data(), buffer.size())->Wait(Soon()));
      } else {
        CHORUS_RETURN_IF_ERROR(peer->Recv(2, buffer.data(), buffer.size())->Wait(Soon()));
      }
    }
    if (rank == 0) {
      CHORUS_RETURN_IF_ERROR(peer->Recv(3, &word, 8)->Wait(Soon()));
    } else {
      if (buffer.front() != 1 || buffer.back() != 1) return InternalError("wrong payload");
      CHORUS_RETURN_IF_ERROR(peer->Send(3, &word, 8)->Wait(Soon()));
    }
    const double seconds = Seconds(Clock::now() - start);
    if (rank == 0 && round == 1) {
      const double gbs = settings.messages * static_cast<double>(settings.bytes) / seconds / 1e9;
      std::printf("%zu MiB one-way x %d: %.2f GB/s (%.2f ms per message)\n",
                  settings.bytes >> 20, settings.messages, gbs,
                  seconds * 1e3 / settings.messages);
    }
  }
  return absl::OkStatus();
}

void PrintMemcpyLimit(size_t bytes) {
  std::vector<char> from(bytes, 1), to(bytes, 0);
  std::memcpy(to.data(), from.data(), bytes);  // fault the pages in
  const auto start = Clock::now();
  constexpr int kCopies = 5;
  for (int i = 0; i < kCopies; ++i) {
    from[i] = static_cast<char>(i);
    std::memcpy(to.data(), from.data(), bytes);
  }
  const double seconds = Seconds(Clock::now() - start);
  std::printf("machine limit: one memcpy of %zu MiB in one process: %.2f GB/s\n", bytes >> 20,
              kCopies * static_cast<double>(bytes) / seconds / 1e9);
}

int Main(int argc, char** argv) {
  Settings settings;
  int megabytes = 64;
  if ((argc > 1 && !absl::SimpleAtoi(argv[1], &settings.iterations)) ||
      (argc > 2 && !absl::SimpleAtoi(argv[2], &megabytes)) ||
      (argc > 3 && !absl::SimpleAtoi(argv[3], &settings.messages)) || settings.iterations < 1 ||
      megabytes < 1 || settings.messages < 1) {
    std::fprintf(stderr, "usage: shm_pingpong [iterations] [megabytes] [messages]\n");
    return 2;
  }
  settings.bytes = static_cast<size_t>(megabytes) << 20;
  char pattern[] = "/tmp/shm_pingpong.XXXXXX";
  const char* dir = mkdtemp(pattern);
  if (dir == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string mode = GetEnv("CHORUS_SHM_SINGLE_COPY").value_or("auto (default)");
  std::printf("shm_pingpong: 2 processes, CHORUS_SHM_SINGLE_COPY=%s, %ld cores online\n",
              mode.c_str(), sysconf(_SC_NPROCESSORS_ONLN));
  std::fflush(stdout);
  pid_t children[2];
  for (int rank = 0; rank < 2; ++rank) {
    children[rank] = fork();
    if (children[rank] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      const absl::Status status = RunRank(rank, dir, settings);
      if (!status.ok()) std::fprintf(stderr, "rank %d: %s\n", rank, ErrorText(status).c_str());
      std::fflush(stdout);
      _exit(status.ok() ? 0 : 1);
    }
  }
  // Bound the whole run: a hung child is killed.
  const auto give_up = Clock::now() + std::chrono::minutes(5);
  int failures = 0;
  for (pid_t child : children) {
    int status = 0;
    while (waitpid(child, &status, WNOHANG) == 0) {
      if (Clock::now() > give_up) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        break;
      }
      usleep(10000);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  std::filesystem::remove_all(dir);
  PrintMemcpyLimit(settings.bytes);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) { return chorus::Main(argc, argv); }
