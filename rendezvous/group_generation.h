// One generation of a named group of ranks in a store, so that a name can be used again once
// the group that had it is gone: a framework that re-creates its process group between phases,
// a test that runs twice. Each creation of the name gets keys of its own, so a new member never
// reads a departed member's addresses, whatever the timing.
//
// Keys, under "<name>/" in the store:
//   joins/<size>/<rank>      how often rank <rank> of a group of <size> has joined the name;
//                            the next join's count is the generation, the same on every rank
//                            because every rank joins once per creation (kept for the next)
//   holders/<rank>, holder/<rank>
//                            a count and "<host identity> <pid>" of the process in which rank
//                            <rank> of the name is live (removed when it leaves)
//   g<k>/...                 generation k's own keys (transport addresses, failure records)
//   g<k>/set_up, g<k>/left   how many ranks have finished setting up, and have left
//   g<k>/leftover/<rank>     keys rank <rank> left for the last rank to delete
// A rank that leaves deletes the keys it wrote while setting up if every rank has set up
// (nobody reads them any more), and lists the rest (those, or records every rank may read, like
// a failure's cause, and counters) for the last rank to leave, which deletes them all. A store
// that serves many creations of a name keeps joins/<size>/<rank> and holders/<rank> (0).
//
// Cost: Join is 3 store operations (5 when a holder is there already); SetUp 1; leaving 4 to 5
// plus one delete per key deleted, and for the last rank to leave one read per rank.
#ifndef CHORUS_RENDEZVOUS_GROUP_GENERATION_H_
#define CHORUS_RENDEZVOUS_GROUP_GENERATION_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chorus/rendezvous/prefix_store.h"
#include "chorus/rendezvous/store.h"

namespace chorus {

// A PrefixStore over generation k's keys that remembers what it wrote, and leaves the group
// when destroyed. Thread-safe.
class GroupGeneration final : public PrefixStore {
 public:
  // Joins the next generation of `name` in `store` (which must outlive the result) as `rank`
  // of `size`. Every rank of the group must join the name as often as the others: a rank that
  // joined once more (a creation that failed on it alone) computes another generation, and the
  // group's set-up then times out waiting for each other; use a fresh name after such a
  // failure. Fails with kInvalidArgument naming the name, the rank and the holder while this
  // rank of the name is live: in this process, in a running process of this host, or in any
  // process of another host (which cannot be checked). A holder that has ended, or whose
  // set-up failed, is taken over. Fails with the store's errors otherwise.
  static absl::StatusOr<std::unique_ptr<GroupGeneration>> Join(Store& store,
                                                               absl::string_view name, int rank,
                                                               int size);
  // Leaves: releases the name for this rank and deletes what is safe to delete (see above),
  // once SetUp() has succeeded; stops at the first store error, which it logs.
  ~GroupGeneration() override;

  int64_t generation() const { return generation_; }

  // Whether rank `rank` of the name has certainly gone: it left (its holder record is gone) or
  // its process, on this host, is no longer running. False when that cannot be told (a holder
  // on another host, a store error). One store read.
  bool HasEnded(int rank);

  // Call once this rank has read everything it needs from the other ranks' keys.
  absl::Status SetUp();

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::Status MultiSet(absl::Span<const KeyValue> pairs) override;

 private:
  GroupGeneration(Store& store, absl::string_view name, int rank, int size, int64_t generation);
  void Record(absl::string_view key);
  // Store calls of leaving: false (logged) on the first failure, after which leaving stops.
  bool Delete(Store& store, const std::string& key);
  bool Count(Store& store, const std::string& key, int64_t delta, int64_t* value = nullptr);
  void LogCleanupFailure(const absl::Status& status) const;

  Store& store_;            // the caller's
  PrefixStore name_store_;  // "<name>/" in the caller's store
  const std::string name_;
  const int rank_;
  const int size_;
  const int64_t generation_;
  std::mutex mu_;
  bool set_up_ ABSL_GUARDED_BY(mu_) = false;
  // Keys this rank wrote: its own (set during set-up), and those every rank may read until the
  // last one leaves (counters, records set after set-up).
  std::set<std::string> own_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> shared_ ABSL_GUARDED_BY(mu_);
};

}  // namespace chorus

#endif  // CHORUS_RENDEZVOUS_GROUP_GENERATION_H_
