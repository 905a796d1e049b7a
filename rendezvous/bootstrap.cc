#include "chorus/rendezvous/bootstrap.h"

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"

namespace chorus {
namespace {

// Rank 0's record is the job id as exactly this many hex digits followed by its address, so
// the job id travels in the same single Set (and the same reads) as the addresses.
constexpr size_t kJobIdHexDigits = 16;

// After a timeout, how long we spend finding out which ranks are missing for the message.
constexpr absl::Duration kDiagnosisBudget = absl::Seconds(1);

std::string AddressKey(int rank) { return absl::StrCat("addr/", rank); }

uint64_t DrawJobId() {
  absl::BitGen random;
  uint64_t id = 0;
  while (id == 0) id = absl::Uniform<uint64_t>(random);
  return id;
}

// "3, 7-12, 40": sorted ranks as ranges.
std::string DescribeRanks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    absl::StrAppend(&out, out.empty() ? "" : ", ", ranks[i]);
    if (j > i) absl::StrAppend(&out, "-", ranks[j]);
    i = j + 1;
  }
  return out;
}

// The ranks from `first_rank` on that have not published, found by probing one key at a time.
// Only for the slow path (a wait that timed out), bounded by kDiagnosisBudget: each probe is a
// Get with an expired deadline (one look, bounded even when the store itself hangs, unlike
// TryGet, which would retry).
struct MissingRanks {
  std::vector<int> ranks;
  int probed_until = 0;  // ranks from here on were not probed (the budget ran out)

  // "[3, 7-12]", plus the ranks left unprobed.
  std::string Describe(int size) const {
    std::string text = absl::StrCat("[", DescribeRanks(ranks), "]");
    if (probed_until < size) {
      absl::StrAppend(&text, " (ranks ", probed_until, "-", size - 1, " not checked)");
    }
    return text;
  }
  // The lowest rank known to have published: every rank below `first_rank` has.
  int LowestPresent(int first_rank) const {
    if (first_rank > 0) return 0;
    int candidate = 0;
    for (int missing : ranks) {
      if (missing != candidate) break;
      ++candidate;
    }
    return candidate < probed_until ? candidate : -1;
  }
};

MissingRanks FindMissingRanks(Store& store, int first_rank, int size) {
  const Deadline budget = Deadline::After(kDiagnosisBudget);
  MissingRanks missing;
  missing.probed_until = first_rank;
  for (; missing.probed_until < size && !budget.Expired(); ++missing.probed_until) {
    const absl::Status probe =
        store.Get(AddressKey(missing.probed_until), Deadline::After(absl::ZeroDuration()))
            .status();
    if (GetErrorKind(probe) == ErrorKind::kDeadlineExceeded) {
      missing.ranks.push_back(missing.probed_until);
    } else if (!probe.ok()) {
      break;
    }
  }
  return missing;
}

// Turns a timeout of the batch starting at `first_rank` into an error naming the ranks that
// have not published.
absl::Status MissingRanksError(Store& store, int rank, int size, int first_rank,
                               const absl::Status& timeout) {
  const MissingRanks missing = FindMissingRanks(store, first_rank, size);
  return DeadlineExceededError(
      absl::StrCat("bootstrap: rank ", rank, " of ", size, " timed out waiting for ranks ",
                   missing.Describe(size), " to publish their addresses in ", store.Describe(),
                   "; check that those ranks started, reached the bootstrap and use the same "
                   "store (",
                   timeout.message(), ")"),
      missing.ranks.empty() ? -1 : missing.ranks.front());
}

// One progress line while the batch starting at `first_rank` is incomplete, written by the
// lowest rank that has published only, so a job of many ranks logs one line, not one per rank.
void ReportWaiting(Store& store, int rank, int size, int first_rank, absl::Duration waited,
                   Deadline deadline) {
  const MissingRanks missing = FindMissingRanks(store, first_rank, size);
  if (missing.LowestPresent(first_rank) != rank) return;
  CHORUS_LOG(kWarn, "rendezvous")
      << "bootstrap: rank " << rank << " of " << size << " has waited "
      << absl::FormatDuration(absl::Trunc(waited, absl::Seconds(1))) << " for ranks "
      << missing.Describe(size) << " to publish their addresses in " << store.Describe()
      << "; still waiting"
      << (deadline.IsInfinite()
              ? std::string()
              : absl::StrCat(", for up to ",
                             absl::FormatDuration(absl::Trunc(deadline.Remaining(),
                                                              absl::Seconds(1))),
                             " more"));
}

// Reads `keys` (the batch starting at `first_rank`) once all are there, logging progress
// every `options.progress_interval` while some are missing.
absl::StatusOr<std::vector<std::string>> ReadBatch(Store& store, int rank, int size,
                                                   int first_rank,
                                                   const std::vector<std::string>& keys,
                                                   Deadline deadline,
                                                   const BootstrapOptions& options) {
  const absl::Time started = absl::Now();
  while (true) {
    const bool last_slice = deadline.Remaining() <= options.progress_interval;
    const Deadline slice = last_slice ? deadline : Deadline::After(options.progress_interval);
    absl::StatusOr<std::vector<std::string>> values = store.MultiGet(keys, slice);
    if (last_slice || values.ok() ||
        GetErrorKind(values.status()) != ErrorKind::kDeadlineExceeded) {
      return values;
    }
    ReportWaiting(store, rank, size, first_rank, absl::Now() - started, deadline);
  }
}

}  // namespace

absl::StatusOr<BootstrapResult> ExchangeAddresses(Store& store, int rank, int size,
                                                  absl::string_view my_address, Deadline deadline,
                                                  const BootstrapOptions& options) {
  if (size < 1) {
    return InvalidArgumentError(absl::StrCat("bootstrap: size ", size, " must be at least 1"));
  }
  if (rank < 0 || rank >= size) {
    return InvalidArgumentError(
        absl::StrCat("bootstrap: rank ", rank, " is outside [0, ", size, ")"));
  }
  if (options.batch_size < 1) {
    return InvalidArgumentError(
        absl::StrCat("bootstrap: batch size ", options.batch_size, " must be at least 1"));
  }
  if (options.progress_interval <= absl::ZeroDuration()) {
    return InvalidArgumentError("bootstrap: the progress interval must be positive");
  }

  std::string record(my_address);
  if (rank == 0) record = absl::StrCat(absl::StrFormat("%016x", DrawJobId()), my_address);
  CHORUS_RETURN_IF_ERROR(
      Annotate(store.Set(AddressKey(rank), record),
               absl::StrCat("bootstrap: rank ", rank, " publishing its address")));

  BootstrapResult result;
  result.addresses.reserve(size);
  for (int first = 0; first < size; first += options.batch_size) {
    const int last = std::min(size, first + options.batch_size);
    std::vector<std::string> keys;
    keys.reserve(last - first);
    for (int peer = first; peer < last; ++peer) keys.push_back(AddressKey(peer));
    absl::StatusOr<std::vector<std::string>> values =
        ReadBatch(store, rank, size, first, keys, deadline, options);
    if (!values.ok()) {
      if (GetErrorKind(values.status()) == ErrorKind::kDeadlineExceeded) {
        return MissingRanksError(store, rank, size, first, values.status());
      }
      return Annotate(values.status(),
                      absl::StrCat("bootstrap: rank ", rank, " reading addresses"));
    }
    for (std::string& value : *values) result.addresses.push_back(std::move(value));
  }

  std::string& rank0 = result.addresses[0];
  if (rank0.size() < kJobIdHexDigits ||
      !absl::SimpleHexAtoi(absl::string_view(rank0).substr(0, kJobIdHexDigits), &result.job_id) ||
      result.job_id == 0) {
    return MismatchError(
        absl::StrCat("bootstrap: the record under '", AddressKey(0), "' in ", store.Describe(),
                     " was not written by rank 0 of a Chorus bootstrap; is another job or "
                     "communicator using the same store prefix?"),
        0);
  }
  rank0.erase(0, kJobIdHexDigits);
  CHORUS_LOG(kDebug, "rendezvous") << "bootstrap: rank " << rank << " of " << size
                                   << " has all addresses, job id " << result.job_id;
  return result;
}

}  // namespace chorus
