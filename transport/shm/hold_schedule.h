// When the large messages that arrived before their receive are pulled.
//
// An unmatched announcement is held as a descriptor for a while, so that a receive posted soon
// still gets the single copy out of the sender's buffer, and is pulled into a buffer of this
// rank once its hold is over, so that its sender completes even if no receive comes. This
// class owns the order in which held messages fall due and the policy that sets their times;
// the engine keeps the messages themselves (in its match table) and does the pulls.
//
// Thread-safety: the entries are guarded by the engine's mutex, which the schedule is given;
// the time of the next pull is published so that waiters can bound their sleep without it.
#ifndef CHORUS_TRANSPORT_SHM_HOLD_SCHEDULE_H_
#define CHORUS_TRANSPORT_SHM_HOLD_SCHEDULE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "chorus/transport/request.h"

namespace chorus::shm {

class HoldSchedule {
 public:
  using Clock = std::chrono::steady_clock;

  // A held message: the unexpected message from `peer` with `tag` that the match table
  // numbered `arrival`.
  struct Entry {
    int peer = -1;
    Tag tag = 0;
    uint64_t arrival = 0;
  };

  // `mu` guards the schedule; `ranks` is the size of the mesh.
  HoldSchedule(std::mutex& mu, int ranks);

  // Holds `entry` for `hold` (ShmOptions::HoldFor its length), counted from when the sender's
  // previously held message is due. `unclaimed_slots`: how many of the sender's rendezvous
  // slots towards this rank wait for a claim; past half of them the message is due at once.
  void Hold(const Entry& entry, absl::Duration hold, int unclaimed_slots)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool empty() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return held_.empty(); }
  // Takes the earliest entry due by `now` into `entry`; false once none is.
  bool PopDue(Clock::time_point now, Entry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Clear() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Time until the earliest entry is due (infinite if none). Any thread, without the mutex.
  absl::Duration UntilNextPull() const;

 private:
  struct Held {
    Clock::time_point pull_at;
    Entry entry;
  };

  void PublishNextPull() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::mutex& mu_;
  std::deque<Held> held_ ABSL_GUARDED_BY(mu_);  // in due order
  // Per sender: when its last held message is due.
  std::vector<Clock::time_point> last_pull_at_ ABSL_GUARDED_BY(mu_);
  // held_.front().pull_at since the clock's epoch, in its ticks; max() while empty.
  std::atomic<Clock::rep> next_pull_{Clock::duration::max().count()};
};

}  // namespace chorus::shm

#endif  // CHORUS_TRANSPORT_SHM_HOLD_SCHEDULE_H_
