// Runs R ranks of a test body, either as threads of this process or as forked processes,
// always bounded in time and always cleaning up what it started.
#ifndef CHORUS_TESTS_HARNESS_MULTIRANK_H_
#define CHORUS_TESTS_HARNESS_MULTIRANK_H_

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace chorus::testing {

using RankBody = std::function<absl::Status(int rank)>;

// Runs body(rank) for rank in [0, size) on one thread each and returns each rank's status.
// A thread that is still running after `timeout` cannot be stopped safely, so the whole test
// process is aborted with a message naming the stuck ranks: a hang becomes a failure.
std::vector<absl::Status> RunRanksAsThreads(int size, const RankBody& body,
                                            absl::Duration timeout);

// How one forked rank ended.
struct ProcessOutcome {
  int rank = -1;
  pid_t pid = -1;
  bool exited = false;     // exited normally (see exit_code)
  int exit_code = -1;
  int term_signal = 0;     // the signal that ended it, if any
  bool timed_out = false;  // still running at the timeout, then killed
  std::string message;     // the status text the rank reported (empty when OK)

  bool ok() const { return exited && exit_code == 0; }
  std::string Describe() const;
};

// Forked ranks. The constructor forks one child per rank; each runs body(rank) and exits 0 on
// OK, 1 on error (sending the status text back over a pipe). The destructor SIGKILLs and reaps
// every child still running. Fork only from a test thread while no other threads exist.
class RankProcesses {
 public:
  RankProcesses(int size, const RankBody& body);
  ~RankProcesses();
  RankProcesses(const RankProcesses&) = delete;
  RankProcesses& operator=(const RankProcesses&) = delete;

  int size() const { return static_cast<int>(pids_.size()); }
  pid_t pid(int rank) const { return pids_[rank]; }

  // Sends `signal` to one rank (SIGKILL, SIGSTOP, ...).
  void Signal(int rank, int signal);

  // Waits for every rank to end, killing those still running at `timeout`.
  std::vector<ProcessOutcome> Wait(absl::Duration timeout);
  // Waits for one rank to end (and reaps it), killing it if it still runs at `timeout`.
  ProcessOutcome WaitFor(int rank, absl::Duration timeout);

 private:
  void WaitForRanks(const std::vector<int>& ranks, absl::Duration timeout);

  std::vector<pid_t> pids_;
  std::vector<int> message_fds_;
  std::vector<bool> reaped_;
  std::vector<ProcessOutcome> outcomes_;  // index = rank; filled in as ranks are reaped
};

// Shorthand: fork `size` ranks, wait, return their outcomes.
std::vector<ProcessOutcome> RunRanksAsProcesses(int size, const RankBody& body,
                                                absl::Duration timeout);

// A fresh directory under TEST_TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then released).
int PickFreeLoopbackPort();

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_HARNESS_MULTIRANK_H_
