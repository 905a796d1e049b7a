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

// Turns a timeout of the batch starting at `first_rank` into an error naming the ranks that
// have not published, probing one key at a time. This is the failure path only, bounded by
// kDiagnosisBudget: each probe is a Get with an expired deadline (one look, bounded even when
// the store itself hangs, unlike TryGet, which would retry).
absl::Status MissingRanksError(Store& store, int rank, int size, int first_rank,
                               const absl::Status& timeout) {
  const Deadline budget = Deadline::After(kDiagnosisBudget);
  std::vector<int> missing;
  int probed_until = first_rank;
  for (; probed_until < size && !budget.Expired(); ++probed_until) {
    const absl::Status probe =
        store.Get(AddressKey(probed_until), Deadline::After(absl::ZeroDuration())).status();
    if (GetErrorKind(probe) == ErrorKind::kDeadlineExceeded) {
      missing.push_back(probed_until);
    } else if (!probe.ok()) {
      break;
    }
  }
  std::string unchecked;
  if (probed_until < size) {
    unchecked = absl::StrCat(" (ranks ", probed_until, "-", size - 1, " not checked)");
  }
  return DeadlineExceededError(
      absl::StrCat("bootstrap: rank ", rank, " of ", size, " timed out waiting for ranks [",
                   DescribeRanks(missing), "]", unchecked, " to publish their addresses in ",
                   store.Describe(),
                   "; check that those ranks started, reached the bootstrap and use the same "
                   "store (",
                   timeout.message(), ")"),
      missing.empty() ? -1 : missing.front());
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
    absl::StatusOr<std::vector<std::string>> values = store.MultiGet(keys, deadline);
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
