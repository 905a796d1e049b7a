#include "chorus/transport/shm/waiters.h"

#include "chorus/core/host_identity.h"

namespace chorus::shm {
namespace {

constexpr int kYieldEveryOversubscribed = 1;
constexpr int kYieldEveryDedicated = 256;

// Whether the ranks on this host (of `addresses`) outnumber the cores this process may use.
bool Oversubscribed(const std::vector<InboxAddress>& addresses) {
  int local = 0;
  for (const InboxAddress& address : addresses) {
    if (address.host == LocalHostIdentity()) ++local;
  }
  return local > UsableCores();
}

}  // namespace

Waiters::Waiters(InboxHeader& doorbell, absl::Duration spin,
                 const std::vector<InboxAddress>& addresses)
    : doorbell_(doorbell),
      spin_policy_(spin),
      yield_every_(Oversubscribed(addresses) ? kYieldEveryOversubscribed : kYieldEveryDedicated) {}

void Waiters::WakeIfCompleted() {
  if (!completed_since_wake_.load(std::memory_order_relaxed) ||
      !completed_since_wake_.exchange(false, std::memory_order_acq_rel)) {
    return;
  }
  // A read-modify-write, like the waiter's increment before it checks done(): of the two, the
  // later one sees the earlier.
  if (sleeping_.fetch_add(0, std::memory_order_seq_cst) > 0) WakeAll(doorbell_);
}

}  // namespace chorus::shm
