// Whether the processes of this rank's peers are still alive, so that a peer that dies fails
// its requests within milliseconds instead of at their deadlines.
//
// Owns a pidfd per watched peer in another process, opened before that peer's inbox is
// attached (the attach checks the inbox's nonce, which only the process we hold the pidfd of
// can have, so a recycled pid cannot slip in), and the event that ends a wait for a death at
// shutdown. Where pidfd_open is missing, a look asks kill(pid, 0) instead.
//
// Thread-safety: the pidfds are guarded by the engine's mutex, which the object is given; a
// Look is gathered under it and waited on without it; Stop is for any thread.
#ifndef CHORUS_TRANSPORT_SHM_PEER_LIVENESS_H_
#define CHORUS_TRANSPORT_SHM_PEER_LIVENESS_H_

#include <poll.h>
#include <sys/types.h>

#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace chorus::shm {

class PeerLiveness {
 public:
  // One look at the peers' liveness: what to wait on, and the peers found dead.
  class Look {
   public:
    // Waits up to `timeout_ms` for a watched peer to die (or for Stop); returns the ranks of
    // the peers found dead.
    const std::vector<int>& Wait(int timeout_ms);

   private:
    friend class PeerLiveness;
    std::vector<struct pollfd> fds_;
    std::vector<int> ranks_;  // of fds_[i]; -1 for the stop event
    std::vector<int> dead_;
  };

  // `mu` guards the pidfds; `ranks` is the size of the mesh.
  PeerLiveness(std::mutex& mu, int ranks);
  ~PeerLiveness();
  PeerLiveness(const PeerLiveness&) = delete;
  PeerLiveness& operator=(const PeerLiveness&) = delete;

  // Starts watching `pid`, the process of peer `rank` in another process; false when that
  // process is not running.
  bool Watch(int rank, pid_t pid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A look that so far waits only for Stop.
  Look Begin() const;
  // Adds peer `rank` (process `pid`) to `look`. A peer in this process is never found dead.
  void Add(int rank, pid_t pid, Look* look) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the Wait of every look, now and later.
  void Stop();

 private:
  std::mutex& mu_;
  const int stop_event_;                          // eventfd
  std::vector<int> pidfds_ ABSL_GUARDED_BY(mu_);  // by rank; -1 where not watched by pidfd
};

}  // namespace chorus::shm

#endif  // CHORUS_TRANSPORT_SHM_PEER_LIVENESS_H_
