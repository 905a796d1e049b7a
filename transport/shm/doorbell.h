// The doorbell of an inbox: a futex word in shared memory on which the owner's idle threads
// sleep, and which writers ring after publishing (see InboxHeader).
//
// Lost wake-ups are excluded by a Dekker pair: a sleeper increments `sleepers` and then looks for
// work; a writer publishes and then reads `sleepers` with a read-modify-write, so at least one of
// them sees the other. The sleeper passes the doorbell value it read *before* looking to
// FUTEX_WAIT, so a ring in between makes the wait return at once.
#ifndef CHORUS_TRANSPORT_SHM_DOORBELL_H_
#define CHORUS_TRANSPORT_SHM_DOORBELL_H_

#include <cstdint>

#include "absl/time/time.h"
#include "chorus/transport/shm/layout.h"

namespace chorus::shm {

// Writer side: wakes the sleepers of `header`, if there are any. Costs one atomic
// read-modify-write when nobody sleeps. Call after publishing what the sleepers should see.
void RingDoorbell(InboxHeader& header);

// Wakes every sleeper of `header` unconditionally (local completions, shutdown).
void WakeAll(InboxHeader& header);

// Sleeper side, used as: seq = BeginSleep(h); <look for work>; if none: Sleep(h, seq, max);
// EndSleep(h).
uint32_t BeginSleep(InboxHeader& header);
// Sleeps until the doorbell rings after `seq` was read, or `max` passes (spurious returns are
// possible; callers loop).
void Sleep(InboxHeader& header, uint32_t seq, absl::Duration max);
void EndSleep(InboxHeader& header);

}  // namespace chorus::shm

#endif  // CHORUS_TRANSPORT_SHM_DOORBELL_H_
