// How long a thread waiting for a message polls before it sleeps, learned from how its
// recent waits ended.
//
// Polling pays when the message arrives within the budget: sleeping and being woken costs tens
// of microseconds on virtual machines, several times a small message's flight. It wastes a
// core when the message does not come in time, and that hurts most where ranks outnumber cores
// and the rank being waited for needs the core to send it. So the policy keeps a score of how
// full-budget polls ended: a poll that saw its request done raises it by kHitCredit, one that
// gave up and slept lowers it by one. While the score is positive (about one poll in five or
// more pays off) every wait polls for the whole budget; otherwise a wait's budget is zero (it
// sleeps after the few polls its transport's loop always makes), and every kProbeInterval-th
// wait still polls for the whole budget, so the score recovers once polling pays again.
//
// Thread-safe and lock-free; one per device (all its waiting threads share what they learn).
#ifndef CHORUS_TRANSPORT_SPIN_POLICY_H_
#define CHORUS_TRANSPORT_SPIN_POLICY_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace chorus {

class SpinPolicy {
 public:
  static constexpr int kHitCredit = 4;
  static constexpr int kMaxScore = 32;
  static constexpr uint32_t kProbeInterval = 16;

  // What one wait does: poll for `spin`, then sleep. `full` when `spin` is the whole budget
  // (only such waits teach the policy anything).
  struct Plan {
    absl::Duration spin;
    bool full;
  };

  explicit SpinPolicy(absl::Duration budget) : budget_(budget) {}
  SpinPolicy(const SpinPolicy&) = delete;
  SpinPolicy& operator=(const SpinPolicy&) = delete;

  Plan Next() {
    const bool probe = waits_.fetch_add(1, std::memory_order_relaxed) % kProbeInterval == 0;
    if (probe || score_.load(std::memory_order_relaxed) > 0) return {budget_, true};
    return {absl::ZeroDuration(), false};
  }

  // How a wait planned by Next() ended: `done_while_polling` when its request completed before
  // the poll budget ran out (it never slept).
  void Record(const Plan& plan, bool done_while_polling) {
    if (!plan.full || budget_ == absl::ZeroDuration()) return;
    const int change = done_while_polling ? kHitCredit : -1;
    int score = score_.load(std::memory_order_relaxed);
    int next;
    do {
      next = score + change;
      next = next < 0 ? 0 : next > kMaxScore ? kMaxScore : next;
    } while (next != score &&
             !score_.compare_exchange_weak(score, next, std::memory_order_relaxed));
  }

  // Whether waits currently poll for the whole budget (tests and diagnostics).
  bool polling() const { return score_.load(std::memory_order_relaxed) > 0; }

 private:
  const absl::Duration budget_;
  std::atomic<uint32_t> waits_{0};
  std::atomic<int> score_{kMaxScore};  // optimistic: poll until polling is seen not to pay
};

}  // namespace chorus

#endif  // CHORUS_TRANSPORT_SPIN_POLICY_H_
