// The bootstrap exchange: every rank publishes its transport address once and learns everyone
// else's, plus a job id drawn by rank 0 that transports put in their handshakes to refuse
// connections from other jobs.
//
// Cost per rank: one Set and ceil(size / batch_size) MultiGets, i.e. O(size) keys read and
// O(size / batch_size) store round trips. Nothing is O(size^2) per rank.
#ifndef CHORUS_RENDEZVOUS_BOOTSTRAP_H_
#define CHORUS_RENDEZVOUS_BOOTSTRAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "chorus/core/deadline.h"
#include "chorus/rendezvous/store.h"

namespace chorus {

struct BootstrapOptions {
  // Keys read per MultiGet. Larger batches mean fewer round trips but bigger replies.
  int batch_size = 256;
  // While ranks are missing, the lowest rank that has published logs a warning this often
  // naming the missing ranks, so a job waiting for a rank that never started is not silent
  // until its deadline.
  absl::Duration progress_interval = absl::Seconds(5);
};

struct BootstrapResult {
  uint64_t job_id = 0;                 // non-zero, the same on every rank
  std::vector<std::string> addresses;  // index = rank
};

// Publishes `my_address` under "addr/<rank>" and returns every rank's address. Keys are used
// as they are: give each communicator its own PrefixStore, and a fresh prefix (or directory)
// per job, since a stale value left by an earlier job would be read as this job's.
// Errors: kInvalidArgument for a bad rank, size or batch size; kDeadlineExceeded naming the
// ranks that never published; kMismatch if rank 0's record is not one this function wrote;
// store errors (kPeerUnavailable) as they come.
// Thread-safe (ranks may be threads sharing one store).
absl::StatusOr<BootstrapResult> ExchangeAddresses(Store& store, int rank, int size,
                                                  absl::string_view my_address,
                                                  Deadline deadline,
                                                  const BootstrapOptions& options = {});

}  // namespace chorus

#endif  // CHORUS_RENDEZVOUS_BOOTSTRAP_H_
