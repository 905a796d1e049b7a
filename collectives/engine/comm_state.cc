#include "chorus/collectives/engine/comm_state.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "chorus/collectives/engine/tag.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"

namespace chorus {
namespace {

constexpr absl::string_view kFailureKey = "failure";
constexpr absl::string_view kFailureClaimsKey = "failure/claims";

}  // namespace

size_t PiggybackBytesFor(const DeviceLinks& links) {
  // 0: the device leaves it to the collectives.
  auto of = [](const LinkProfile& link) {
    return link.piggyback_bytes == 0 ? kPiggybackBytes : link.piggyback_bytes;
  };
  return std::min({of(links.local), of(links.remote), kMostPiggybackBytes});
}

PipelineSegments PipelineSegmentsFor(const LinkProfile& remote) {
  const size_t relay = remote.relay_segment_bytes;
  return {remote.segment_bytes, relay != 0 ? relay : remote.segment_bytes};
}

bool EagerSendsFor(const DeviceLinks& links) {
  return links.local.eager_sends && links.remote.eager_sends;
}

CommState::CommState(std::string name, int rank, int size, std::shared_ptr<Store> store,
                     std::shared_ptr<Mesh> mesh, CommTuning tuning, Topology topology,
                     std::unique_ptr<TraceLog> trace, SharedSlots* shared_slots)
    : name_(std::move(name)),
      rank_(rank),
      size_(size),
      tag_id_(CommunicatorTagId(name_)),
      store_(std::move(store)),
      mesh_(std::move(mesh)),
      tuning_(tuning),
      topology_(std::move(topology)),
      header_ring_(size),
      trace_(std::move(trace)),
      shared_slots_(shared_slots),
      connections_(new std::atomic<Connection*>[size]()) {}

absl::StatusOr<Connection*> CommState::GetConnection(int peer) {
  const bool in_range = peer >= 0 && peer < size_;
  if (in_range) {
    if (Connection* known = connections_[peer].load(std::memory_order_acquire)) return known;
  }
  absl::StatusOr<Connection*> connection = mesh_->GetConnection(peer);
  if (connection.ok() && in_range) {
    connections_[peer].store(*connection, std::memory_order_release);
  }
  return connection;
}

absl::Status CommState::broken() const {
  if (!is_broken_.load(std::memory_order_acquire)) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

void CommState::Break(const absl::Status& error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) return;
    broken_ = error;
    is_broken_.store(true, std::memory_order_release);
  }
  CHORUS_LOG(kWarn, "collectives") << "communicator " << name_ << " is broken: " << error.message();
  // One writer publishes; the record carries the error kind and the peer at fault (-1: none),
  // so other ranks fail with the same kind and ErrorPeerRank: the survivors of a dead rank all
  // name it, also those that only hear of it through the store (docs/reliability.md).
  absl::StatusOr<int64_t> claims = store_->Add(kFailureClaimsKey, 1);
  if (claims.ok() && *claims == 1) {
    const absl::Status set = store_->Set(
        kFailureKey, absl::StrCat(static_cast<int>(GetErrorKind(error)), "|",
                                  ErrorPeerRank(error).value_or(-1), "|", error.message()));
    if (!set.ok()) {
      CHORUS_LOG(kWarn, "collectives") << "could not publish the failure: " << set.message();
    }
  }
  mesh_->Abort(error.message());
}

std::unique_ptr<uint8_t[]> CommState::AcquireScratch(size_t bytes, size_t* capacity) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = scratch_.lower_bound(bytes);
    // Reuse a cached buffer unless it is more than twice too large.
    if (it != scratch_.end() && it->first <= 2 * bytes + 4096) {
      *capacity = it->first;
      std::unique_ptr<uint8_t[]> buffer = std::move(it->second);
      scratch_bytes_ -= it->first;
      scratch_.erase(it);
      return buffer;
    }
  }
  *capacity = bytes == 0 ? 1 : bytes;
  return std::unique_ptr<uint8_t[]>(new uint8_t[*capacity]);
}

void CommState::ReleaseScratch(std::unique_ptr<uint8_t[]> buffer, size_t capacity) {
  // Keeps at most this much cached; beyond it, the largest buffers are dropped first.
  constexpr size_t kMaxCachedBytes = size_t{256} << 20;
  std::lock_guard<std::mutex> lock(mu_);
  scratch_.emplace(capacity, std::move(buffer));
  scratch_bytes_ += capacity;
  while (scratch_bytes_ > kMaxCachedBytes) {
    auto largest = std::prev(scratch_.end());
    scratch_bytes_ -= largest->first;
    scratch_.erase(largest);
  }
}

namespace {

// A record is "kind|peer|message" (Break writes it).
std::optional<absl::Status> ParseFailure(const std::string& text) {
  const size_t kind_end = text.find('|');
  const size_t peer_end = kind_end == std::string::npos ? kind_end : text.find('|', kind_end + 1);
  int kind = 0;
  int peer = -1;
  if (peer_end == std::string::npos || !absl::SimpleAtoi(text.substr(0, kind_end), &kind) ||
      !absl::SimpleAtoi(text.substr(kind_end + 1, peer_end - kind_end - 1), &peer)) {
    return InternalError(absl::StrCat("malformed failure record: ", text));
  }
  return MakeError(static_cast<ErrorKind>(kind), text.substr(peer_end + 1), peer);
}

}  // namespace

std::optional<absl::Status> CommState::PeekFailure() {
  absl::StatusOr<std::optional<std::string>> record = store_->TryGet(kFailureKey);
  if (!record.ok() || !record->has_value()) return std::nullopt;
  return ParseFailure(**record);
}

std::optional<absl::Status> CommState::PublishedFailure() {
  if (std::optional<absl::Status> failure = PeekFailure()) return failure;
  // A writer may have claimed the record and not finished writing it yet.
  absl::StatusOr<int64_t> claims = store_->Add(kFailureClaimsKey, 0);
  if (!claims.ok() || *claims == 0) return std::nullopt;
  absl::StatusOr<std::string> value =
      store_->Get(kFailureKey, Deadline::After(absl::Milliseconds(500)));
  if (!value.ok()) return std::nullopt;
  return ParseFailure(*value);
}

}  // namespace chorus
