#include "chorus/transport/shm/hold_schedule.h"

#include <algorithm>

#include "chorus/transport/shm/layout.h"

namespace chorus::shm {
namespace {

// How many of one sender's slots may wait for a claim while its unmatched messages wait out a
// hold: half of them, so the other half stays free for messages whose receives are posted.
constexpr int kMaxHeldPerPeer = kSlotsPerPeer / 2;

}  // namespace

HoldSchedule::HoldSchedule(std::mutex& mu, int ranks) : mu_(mu), last_pull_at_(ranks) {}

void HoldSchedule::Hold(const Entry& entry, absl::Duration hold, int unclaimed_slots) {
  // One sender's held messages are pulled one after another: a message's hold starts when the
  // one held before it from the same sender is due. A pipelined sender announces many segments
  // at once and the receiver works through them in order, so each gets the time its
  // predecessors take instead of all expiring together and being copied twice.
  // Once more than kMaxHeldPerPeer of the sender's slots wait for a claim, a message is pulled
  // at once instead: a held message keeps its rendezvous slot, and a sender running far ahead
  // of our receives must never have every slot idle in a hold, or all its later messages (small
  // ones too, queued behind) wait the holds out although their receives are posted.
  const Clock::time_point now = Clock::now();
  Clock::time_point pull_at = now;
  if (unclaimed_slots <= kMaxHeldPerPeer) {
    Clock::time_point& last = last_pull_at_[entry.peer];
    pull_at = std::max(now, last) + absl::ToChronoNanoseconds(hold);
    last = pull_at;
  }
  const Held held{pull_at, entry};
  held_.insert(std::upper_bound(held_.begin(), held_.end(), held,
                                [](const Held& a, const Held& b) { return a.pull_at < b.pull_at; }),
               held);
  PublishNextPull();
}

bool HoldSchedule::PopDue(Clock::time_point now, Entry* entry) {
  if (held_.empty() || held_.front().pull_at > now) {
    PublishNextPull();
    return false;
  }
  *entry = held_.front().entry;
  held_.pop_front();
  return true;
}

void HoldSchedule::Clear() {
  held_.clear();
  PublishNextPull();
}

void HoldSchedule::PublishNextPull() {
  next_pull_.store(held_.empty() ? Clock::duration::max().count()
                                 : held_.front().pull_at.time_since_epoch().count(),
                   std::memory_order_relaxed);
}

absl::Duration HoldSchedule::UntilNextPull() const {
  const Clock::rep at = next_pull_.load(std::memory_order_relaxed);
  if (at == Clock::duration::max().count()) return absl::InfiniteDuration();
  const Clock::rep now = Clock::now().time_since_epoch().count();
  return absl::FromChrono(Clock::duration(std::max<Clock::rep>(0, at - now)));
}

}  // namespace chorus::shm
