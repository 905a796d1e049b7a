#include "tests/harness/multirank.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chorus/core/logging.h"

namespace chorus::testing {
namespace {

absl::Status RunBody(const RankBody& body, int rank) {
  SetThreadLogRank(rank);
  return body(rank);
}

}  // namespace

std::vector<absl::Status> RunRanksAsThreads(int size, const RankBody& body,
                                            absl::Duration timeout) {
  // std::mutex rather than absl::Mutex: the system Abseil is not built with ThreadSanitizer,
  // which then cannot see absl::Mutex's ordering and reports false races.
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<absl::Status> statuses;
    int finished = 0;
    std::vector<bool> done;
  };
  auto shared = std::make_shared<Shared>();
  shared->statuses.resize(size);
  shared->done.assign(size, false);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([shared, &body, rank] {
      absl::Status status = RunBody(body, rank);
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->statuses[rank] = std::move(status);
      shared->done[rank] = true;
      ++shared->finished;
      shared->cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(shared->mu);
    const bool all_finished =
        shared->cv.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                            [&shared, size] { return shared->finished == size; });
    if (!all_finished) {
      std::vector<int> stuck;
      for (int rank = 0; rank < size; ++rank) {
        if (!shared->done[rank]) stuck.push_back(rank);
      }
      std::fprintf(stderr,
                   "FATAL: rank threads [%s] still running after %s; aborting the test\n",
                   absl::StrJoin(stuck, ",").c_str(), absl::FormatDuration(timeout).c_str());
      std::fflush(stderr);
      std::abort();
    }
  }
  for (std::thread& thread : threads) thread.join();
  return shared->statuses;
}

std::string ProcessOutcome::Describe() const {
  std::string how;
  if (timed_out) {
    how = "timed out and was killed";
  } else if (exited) {
    how = absl::StrCat("exited with code ", exit_code);
  } else {
    how = absl::StrCat("was killed by signal ", term_signal);
  }
  return absl::StrCat("rank ", rank, " (pid ", pid, ") ", how,
                      message.empty() ? "" : absl::StrCat(": ", message));
}

RankProcesses::RankProcesses(int size, const RankBody& body) {
  std::fflush(stdout);
  std::fflush(stderr);
  for (int rank = 0; rank < size; ++rank) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) std::abort();
    const pid_t pid = fork();
    if (pid < 0) std::abort();
    if (pid == 0) {
      close(fds[0]);
      // A child must not outlive the test process, whatever happens to it.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      for (int fd : message_fds_) close(fd);
      const absl::Status status = RunBody(body, rank);
      if (!status.ok()) {
        const std::string text = status.ToString();
        const ssize_t ignored = write(fds[1], text.data(), text.size());
        (void)ignored;
      }
      _exit(status.ok() ? 0 : 1);
    }
    close(fds[1]);
    pids_.push_back(pid);
    message_fds_.push_back(fds[0]);
    reaped_.push_back(false);
    outcomes_.emplace_back();
    outcomes_.back().rank = rank;
    outcomes_.back().pid = pid;
  }
}

RankProcesses::~RankProcesses() {
  for (int rank = 0; rank < size(); ++rank) {
    if (!reaped_[rank]) {
      kill(pids_[rank], SIGKILL);
      waitpid(pids_[rank], nullptr, 0);
    }
    close(message_fds_[rank]);
  }
}

void RankProcesses::Signal(int rank, int signal) {
  if (!reaped_[rank]) kill(pids_[rank], signal);
}

std::vector<ProcessOutcome> RankProcesses::Wait(absl::Duration timeout) {
  std::vector<int> ranks(size());
  std::iota(ranks.begin(), ranks.end(), 0);
  WaitForRanks(ranks, timeout);
  return outcomes_;
}

ProcessOutcome RankProcesses::WaitFor(int rank, absl::Duration timeout) {
  WaitForRanks({rank}, timeout);
  return outcomes_[rank];
}

void RankProcesses::WaitForRanks(const std::vector<int>& ranks, absl::Duration timeout) {
  const auto give_up = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  auto record = [&](int rank, int wait_status) {
    reaped_[rank] = true;
    ProcessOutcome& outcome = outcomes_[rank];
    if (WIFEXITED(wait_status)) {
      outcome.exited = true;
      outcome.exit_code = WEXITSTATUS(wait_status);
    } else if (WIFSIGNALED(wait_status)) {
      outcome.term_signal = WTERMSIG(wait_status);
    }
    char buffer[4096];
    ssize_t n;
    while ((n = read(message_fds_[rank], buffer, sizeof(buffer))) > 0) {
      outcome.message.append(buffer, static_cast<size_t>(n));
    }
  };
  auto remaining = [&] {
    return std::count_if(ranks.begin(), ranks.end(), [&](int rank) { return !reaped_[rank]; });
  };
  while (remaining() > 0 && std::chrono::steady_clock::now() < give_up) {
    for (int rank : ranks) {
      if (reaped_[rank]) continue;
      int wait_status = 0;
      if (waitpid(pids_[rank], &wait_status, WNOHANG) == pids_[rank]) record(rank, wait_status);
    }
    if (remaining() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int rank : ranks) {
    if (reaped_[rank]) continue;
    kill(pids_[rank], SIGKILL);
    int wait_status = 0;
    waitpid(pids_[rank], &wait_status, 0);
    record(rank, wait_status);
    outcomes_[rank].timed_out = true;
  }
}

std::vector<ProcessOutcome> RunRanksAsProcesses(int size, const RankBody& body,
                                                absl::Duration timeout) {
  RankProcesses processes(size, body);
  return processes.Wait(timeout);
}

TempDir::TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(base ? base : "/tmp", "/chorus-test-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) std::abort();
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

int PickFreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    std::abort();
  }
  close(fd);
  return ntohs(address.sin_port);
}

}  // namespace chorus::testing
