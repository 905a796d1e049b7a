#include "chorus/rendezvous/group_generation.h"

#include <unistd.h>

#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "chorus/core/host_identity.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"

namespace chorus {
namespace {

constexpr char kSetUpKey[] = "set_up";
constexpr char kLeftKey[] = "left";
// How long a claimant waits for a holder's record that its writer has counted but not yet
// written (it is written right after the count).
constexpr absl::Duration kHolderRecordWait = absl::Seconds(1);

// Per group size, so that a name used by groups of several sizes in turn (a job that resizes)
// keeps every group's counts aligned.
std::string JoinsKey(int size, int rank) { return absl::StrCat("joins/", size, "/", rank); }
std::string HoldersKey(int rank) { return absl::StrCat("holders/", rank); }
std::string HolderKey(int rank) { return absl::StrCat("holder/", rank); }

std::string LeftoverKey(int rank) { return absl::StrCat("leftover/", rank); }

// Keys are arbitrary bytes: each is written as "<length>:<key>".
std::string EncodeKeys(const std::set<std::string>& keys) {
  std::string encoded;
  for (const std::string& key : keys) absl::StrAppend(&encoded, key.size(), ":", key);
  return encoded;
}

// The keys of EncodeKeys' output; a malformed tail is ignored (it only costs a leftover key).
std::vector<std::string> DecodeKeys(absl::string_view encoded) {
  std::vector<std::string> keys;
  while (!encoded.empty()) {
    const size_t colon = encoded.find(':');
    size_t length = 0;
    if (colon == absl::string_view::npos ||
        !absl::SimpleAtoi(encoded.substr(0, colon), &length) ||
        length > encoded.size() - colon - 1) {
      break;
    }
    keys.emplace_back(encoded.substr(colon + 1, length));
    encoded.remove_prefix(colon + 1 + length);
  }
  return keys;
}

std::string ThisProcess() { return absl::StrCat(LocalHostIdentity(), " ", getpid()); }

// The (store, name, rank) triples live in this process: a holder record naming this process
// is live only if it is here too, else it is left over from a set-up that failed.
struct LiveInProcess {
  std::mutex mu;
  std::set<std::tuple<const Store*, std::string, int>> held ABSL_GUARDED_BY(mu);
};

LiveInProcess& Live() {
  static LiveInProcess* live = new LiveInProcess;
  return *live;
}

// Whether the holder recorded as `record` ("<host identity> <pid>") may still be live: this
// process if it holds the triple, another process of this host while it runs, and any process
// of another host (which this one cannot check).
bool HolderMayBeLive(absl::string_view record, const Store* store, const std::string& name,
                     int rank) {
  const std::vector<absl::string_view> parts = absl::StrSplit(record, ' ');
  int64_t pid = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &pid) || pid <= 0) return false;
  if (parts[0] != LocalHostIdentity()) return true;
  if (pid == getpid()) {
    LiveInProcess& live = Live();
    std::lock_guard<std::mutex> lock(live.mu);
    return live.held.count({store, name, rank}) != 0;
  }
  return ProcessRunning(static_cast<pid_t>(pid));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GroupGeneration>> GroupGeneration::Join(Store& store,
                                                                       absl::string_view name,
                                                                       int rank, int size) {
  PrefixStore name_store(name, store);
  const std::string name_text(name);
  CHORUS_ASSIGN_OR_RETURN(const int64_t holders, name_store.Add(HoldersKey(rank), 1));
  if (holders > 1) {
    absl::StatusOr<std::string> holder =
        name_store.Get(HolderKey(rank), Deadline::After(kHolderRecordWait));
    if (holder.ok() && HolderMayBeLive(*holder, &store, name_text, rank)) {
      CHORUS_RETURN_IF_ERROR(name_store.Add(HoldersKey(rank), -1).status());
      return InvalidArgumentError(absl::StrCat(
          "the name '", name, "' in ", store.Describe(), " is still in use: its rank ", rank,
          " is live in process ", *holder, " (host identity, pid); destroy that communicator "
          "before creating the name again, or choose another name"));
    }
    CHORUS_LOG(kInfo, "rendezvous")
        << "rank " << rank << " of '" << name << "' was last held by "
        << (holder.ok() ? *holder : std::string("a process that never recorded itself"))
        << ", which has ended or failed to set up; taking it over";
    CHORUS_RETURN_IF_ERROR(name_store.Add(HoldersKey(rank), 1 - holders).status());
  }
  CHORUS_RETURN_IF_ERROR(name_store.Set(HolderKey(rank), ThisProcess()));
  CHORUS_ASSIGN_OR_RETURN(const int64_t joins, name_store.Add(JoinsKey(size, rank), 1));
  {
    LiveInProcess& live = Live();
    std::lock_guard<std::mutex> lock(live.mu);
    live.held.insert({&store, name_text, rank});
  }
  return std::unique_ptr<GroupGeneration>(
      new GroupGeneration(store, name, rank, size, joins));
}

GroupGeneration::GroupGeneration(Store& store, absl::string_view name, int rank, int size,
                                 int64_t generation)
    : PrefixStore(absl::StrCat(name, "/g", generation), store),
      store_(store),
      name_store_(name, store),
      name_(name),
      rank_(rank),
      size_(size),
      generation_(generation) {}

GroupGeneration::~GroupGeneration() {
  std::set<std::string> own;
  std::set<std::string> shared;
  bool set_up;
  {
    std::lock_guard<std::mutex> lock(mu_);
    own.swap(own_);
    shared.swap(shared_);
    set_up = set_up_;
  }
  {
    LiveInProcess& live = Live();
    std::lock_guard<std::mutex> lock(live.mu);
    live.held.erase({&store_, name_, rank_});
  }
  // A rank that never finished setting up leaves the store alone: the store may be what failed
  // (each call would wait out its retries), another rank may still read its keys, the next
  // generation never will, and its holder record is taken over by the next Join.
  if (!set_up) return;
  if (!Delete(name_store_, HolderKey(rank_)) || !Count(name_store_, HoldersKey(rank_), -1)) return;
  // Keys this rank cannot delete now are listed for the last rank to leave: its own while a
  // peer may still be setting up (reading them), and those every rank may read until then.
  absl::StatusOr<std::optional<std::string>> set_up_count = PrefixStore::TryGet(kSetUpKey);
  int64_t ranks_set_up = 0;
  const bool everyone_set_up = set_up_count.ok() && set_up_count->has_value() &&
                               absl::SimpleAtoi(**set_up_count, &ranks_set_up) &&
                               ranks_set_up == size_;
  std::set<std::string> leftover = std::move(shared);
  if (everyone_set_up) {
    for (const std::string& key : own) {
      if (!Delete(*this, key)) return;
    }
  } else {
    leftover.insert(own.begin(), own.end());
  }
  if (!leftover.empty()) {
    const absl::Status listed = PrefixStore::Set(LeftoverKey(rank_), EncodeKeys(leftover));
    if (!listed.ok()) {
      LogCleanupFailure(listed);
      return;
    }
  }
  int64_t left = 0;
  if (!Count(*this, kLeftKey, 1, &left) || left != size_) return;
  // The last to leave: every other rank listed its leftovers before it counted itself out.
  for (int rank = 0; rank < size_; ++rank) {
    absl::StatusOr<std::optional<std::string>> listed = PrefixStore::TryGet(LeftoverKey(rank));
    if (!listed.ok()) {
      LogCleanupFailure(listed.status());
      return;
    }
    if (!listed->has_value()) continue;
    for (const std::string& key : DecodeKeys(**listed)) {
      if (!Delete(*this, key)) return;
    }
    if (!Delete(*this, LeftoverKey(rank))) return;
  }
  for (const char* key : {kSetUpKey, kLeftKey}) {
    if (!Delete(*this, key)) return;
  }
}

bool GroupGeneration::Delete(Store& store, const std::string& key) {
  const absl::Status deleted = store.Delete(key);
  if (!deleted.ok()) LogCleanupFailure(deleted);
  return deleted.ok();
}

bool GroupGeneration::Count(Store& store, const std::string& key, int64_t delta,
                            int64_t* value) {
  const absl::StatusOr<int64_t> counted = store.Add(key, delta);
  if (!counted.ok()) {
    LogCleanupFailure(counted.status());
    return false;
  }
  if (value != nullptr) *value = *counted;
  return true;
}

void GroupGeneration::LogCleanupFailure(const absl::Status& status) const {
  CHORUS_LOG(kWarn, "rendezvous") << "rank " << rank_ << " leaving generation " << generation_
                                  << " of '" << name_ << "' left keys behind: "
                                  << status.message();
}

bool GroupGeneration::HasEnded(int rank) {
  absl::StatusOr<std::optional<std::string>> holder = name_store_.TryGet(HolderKey(rank));
  if (!holder.ok()) return false;
  if (!holder->has_value()) return true;
  return !HolderMayBeLive(**holder, &store_, name_, rank);
}

absl::Status GroupGeneration::SetUp() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (set_up_) return absl::OkStatus();
  }
  CHORUS_RETURN_IF_ERROR(PrefixStore::Add(kSetUpKey, 1).status());
  std::lock_guard<std::mutex> lock(mu_);
  set_up_ = true;
  return absl::OkStatus();
}

absl::Status GroupGeneration::Set(absl::string_view key, absl::string_view value) {
  Record(key);
  return PrefixStore::Set(key, value);
}

void GroupGeneration::Record(absl::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  // Written during set-up: this rank's own (its address). Written later: a record for every
  // rank (a failure's cause), which must outlive its writer.
  (set_up_ ? shared_ : own_).emplace(key);
}

absl::StatusOr<int64_t> GroupGeneration::Add(absl::string_view key, int64_t delta) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shared_.emplace(key);
  }
  return PrefixStore::Add(key, delta);
}

absl::Status GroupGeneration::MultiSet(absl::Span<const KeyValue> pairs) {
  for (const KeyValue& pair : pairs) Record(pair.first);
  return PrefixStore::MultiSet(pairs);
}

}  // namespace chorus
