#include "chorus/transport/shm/peer_liveness.h"

#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace chorus::shm {
namespace {

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

}  // namespace

PeerLiveness::PeerLiveness(std::mutex& mu, int ranks)
    : mu_(mu), stop_event_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)), pidfds_(ranks, -1) {}

PeerLiveness::~PeerLiveness() {
  for (int pidfd : pidfds_) {
    if (pidfd >= 0) close(pidfd);
  }
  if (stop_event_ >= 0) close(stop_event_);
}

bool PeerLiveness::Watch(int rank, pid_t pid) {
  pidfds_[rank] = PidfdOpen(pid);
  return pidfds_[rank] >= 0 || errno != ESRCH;
}

PeerLiveness::Look PeerLiveness::Begin() const {
  Look look;
  look.fds_.push_back({stop_event_, POLLIN, 0});
  look.ranks_.push_back(-1);
  return look;
}

void PeerLiveness::Add(int rank, pid_t pid, Look* look) const {
  if (pidfds_[rank] >= 0) {
    look->fds_.push_back({pidfds_[rank], POLLIN, 0});
    look->ranks_.push_back(rank);
  } else if (pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH) {
    look->dead_.push_back(rank);  // no pidfd_open on this kernel
  }
}

void PeerLiveness::Stop() {
  const uint64_t one = 1;
  const ssize_t ignored = write(stop_event_, &one, sizeof(one));
  (void)ignored;
}

const std::vector<int>& PeerLiveness::Look::Wait(int timeout_ms) {
  if (poll(fds_.data(), fds_.size(), timeout_ms) > 0) {
    for (size_t i = 1; i < fds_.size(); ++i) {
      if (fds_[i].revents != 0) dead_.push_back(ranks_[i]);
    }
  }
  return dead_;
}

}  // namespace chorus::shm
