#include "chorus/transport/ibverbs/verbs_engine.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"
#include "chorus/transport/ibverbs/verbs_library.h"

namespace chorus::ibverbs {
namespace {

constexpr int kPollBatch = 32;
// How often timers are looked at: connect deadlines and liveness probes need no finer grain.
constexpr absl::Duration kTickInterval = absl::Milliseconds(10);

}  // namespace

absl::StatusOr<std::shared_ptr<VerbsEngine>> VerbsEngine::Create(
    std::unique_ptr<VerbsContext> context, const VerbsDeviceOptions& options) {
  std::shared_ptr<VerbsEngine> engine(new VerbsEngine(std::move(context), options));
  CHORUS_ASSIGN_OR_RETURN(engine->registrations_,
                          RegistrationCache::Create(*engine->context_, options.reg_cache_bytes));
  // Registered now, so that a receive whose own buffer cannot be registered always has a way
  // to read: a device that cannot register even these fails here, saying why.
  engine->bounce_memory_ = AllocateAligned(kBounceBytes * kBounceBuffers);
  CHORUS_ASSIGN_OR_RETURN(
      engine->bounce_region_,
      engine->context_->Register(reinterpret_cast<uintptr_t>(engine->bounce_memory_.get()),
                                 kBounceBytes * kBounceBuffers));
  for (int i = 0; i < kBounceBuffers; ++i) {
    engine->free_bounce_.push_back(
        {engine->bounce_memory_.get() + i * kBounceBytes, engine->bounce_region_.lkey});
  }
  engine->epoll_ = ScopedFd(epoll_create1(EPOLL_CLOEXEC));
  engine->wake_ = ScopedFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!engine->epoll_.valid() || !engine->wake_.valid()) {
    return InternalError(absl::StrCat("ibverbs: epoll/eventfd: ", std::strerror(errno)));
  }
  for (int fd : {engine->context_->channel()->fd, engine->context_->context()->async_fd,
                 engine->wake_.get()}) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = fd;
    if (epoll_ctl(engine->epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
      return InternalError(absl::StrCat("ibverbs: epoll_ctl: ", std::strerror(errno)));
    }
  }
  if (ibv_req_notify_cq(engine->context_->cq(), 0) != 0) {
    return InternalError("ibverbs: ibv_req_notify_cq failed");
  }
  engine->thread_ = std::thread([raw = engine.get()] { raw->Run(); });
  return engine;
}

VerbsEngine::VerbsEngine(std::unique_ptr<VerbsContext> context, const VerbsDeviceOptions& options)
    : context_(std::move(context)), options_(options) {}

VerbsEngine::~VerbsEngine() {
  stopping_.store(true);
  if (wake_.valid()) {
    const uint64_t one = 1;
    ssize_t written = write(wake_.get(), &one, sizeof(one));
    (void)written;  // the thread also wakes on its tick
  }
  if (thread_.joinable()) thread_.join();
  if (bounce_region_.handle != nullptr) context_->Deregister(bounce_region_);
  registrations_.reset();
}

void VerbsEngine::Attach(uint32_t qp_num, uint32_t serial, QueuePairOwner* owner) {
  owners_[qp_num] = Attached{serial, owner};
}

void VerbsEngine::Detach(uint32_t qp_num) { owners_.erase(qp_num); }

absl::Status VerbsEngine::ReserveCompletions(uint32_t entries) {
  const uint64_t needed = reserved_completions_ + entries;
  ibv_cq* cq = context_->cq();
  if (needed > static_cast<uint64_t>(cq->cqe)) {
    const uint64_t most = static_cast<uint64_t>(context_->device_attr().max_cqe);
    const uint64_t size = std::min(most, std::max(needed, 2 * static_cast<uint64_t>(cq->cqe)));
    const int error = size < needed ? ENOMEM : Verbs().resize_cq(cq, static_cast<int>(size));
    if (error != 0) {
      return InvalidArgumentError(absl::StrCat(
          "ibverbs: the completion queue of ", context_->name(), " holds ", cq->cqe,
          " entries (at most ", most, "), and this process's queue pairs need ", needed,
          (size < needed ? "" : absl::StrCat(" (ibv_resize_cq: ", std::strerror(error), ")")),
          ": use fewer eager slots (CHORUS_IB_SLOTS) or fewer peers per device"));
    }
    CHORUS_LOG(kInfo, "ibverbs") << "the completion queue of " << context_->name() << " grew to "
                                 << cq->cqe << " entries for " << needed;
  }
  reserved_completions_ = needed;
  return absl::OkStatus();
}

bool VerbsEngine::TakeBounce(BounceBuffer* buffer) {
  if (free_bounce_.empty()) return false;
  *buffer = free_bounce_.back();
  free_bounce_.pop_back();
  return true;
}

void VerbsEngine::ReturnBounce(const BounceBuffer& buffer) { free_bounce_.push_back(buffer); }

int VerbsEngine::PollLocked() {
  int total = 0;
  ibv_wc completions[kPollBatch];
  for (;;) {
    const int count = ibv_poll_cq(context_->cq(), kPollBatch, completions);
    if (count <= 0) break;
    total += count;
    for (int i = 0; i < count; ++i) {
      const ibv_wc& completion = completions[i];
      auto it = owners_.find(completion.qp_num);
      // Work requests carry their owner's serial in the upper half of wr_id.
      if (it == owners_.end() || it->second.serial != (completion.wr_id >> 32)) continue;
      it->second.owner->OnCompletion(completion);
    }
  }
  if (total > 0) {
    reads_done_.notify_all();
    // Copy first: pumping may detach nothing, but owners may post and complete requests.
    std::vector<QueuePairOwner*> owners;
    owners.reserve(owners_.size());
    for (const auto& [qp_num, attached] : owners_) owners.push_back(attached.owner);
    for (QueuePairOwner* owner : owners) owner->Pump();
  }
  return total;
}

void VerbsEngine::ReadAsyncEventsLocked() {
  ibv_async_event event{};
  while (Verbs().get_async_event(context_->context(), &event) == 0) {
    const char* what = Verbs().event_type_str(event.event_type);
    switch (event.event_type) {
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR: {
        auto it = owners_.find(event.element.qp->qp_num);
        if (it != owners_.end()) it->second.owner->OnFatalEvent(what);
        break;
      }
      case IBV_EVENT_PORT_ERR:
        // Another port of the adapter going down touches no queue pair of this device's.
        if (event.element.port_num != context_->port()) break;
        [[fallthrough]];
      case IBV_EVENT_CQ_ERR:  // an overrun queue has lost completions: nothing can be trusted
      case IBV_EVENT_DEVICE_FATAL: {
        CHORUS_LOG(kError, "ibverbs") << context_->Describe() << ": " << what;
        std::vector<QueuePairOwner*> owners;
        for (const auto& [qp_num, attached] : owners_) owners.push_back(attached.owner);
        for (QueuePairOwner* owner : owners) owner->OnFatalEvent(what);
        break;
      }
      default:
        CHORUS_LOG(kDebug, "ibverbs") << context_->Describe() << ": " << what;
        break;
    }
    Verbs().ack_async_event(&event);
  }
}

void VerbsEngine::DrainChannel() {
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  unsigned int events = 0;
  while (Verbs().get_cq_event(context_->channel(), &cq, &cq_context) == 0) ++events;
  if (events > 0) Verbs().ack_cq_events(context_->cq(), events);
}

void VerbsEngine::TickLocked(absl::Time now) {
  // Also here, not only when epoll says so: a device busy with completions never reaches the
  // epoll wait, and some failures come only as an event.
  ReadAsyncEventsLocked();
  std::vector<QueuePairOwner*> owners;
  owners.reserve(owners_.size());
  for (const auto& [qp_num, attached] : owners_) owners.push_back(attached.owner);
  for (QueuePairOwner* owner : owners) owner->OnTick(now);
}

void VerbsEngine::Run() {
  absl::Time last_completion = absl::Now();
  absl::Time next_tick = last_completion + kTickInterval;
  while (!stopping_.load(std::memory_order_relaxed)) {
    int completed;
    absl::Time now;
    {
      std::lock_guard<std::mutex> lock(mu_);
      completed = PollLocked();
      now = absl::Now();
      if (now >= next_tick) {
        TickLocked(now);
        next_tick = now + kTickInterval;
      }
    }
    if (completed > 0) {
      last_completion = now;
      continue;
    }
    if (now - last_completion < options_.spin) {
      std::this_thread::yield();
      continue;
    }
    // Arm the channel, then look once more: a completion that came before the arming raises
    // no event.
    ibv_req_notify_cq(context_->cq(), 0);
    {
      std::lock_guard<std::mutex> lock(mu_);
      completed = PollLocked();
    }
    if (completed > 0) {
      last_completion = absl::Now();
      continue;
    }
    const int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(next_tick - absl::Now())) + 1;
    epoll_event events[4];
    const int ready = epoll_wait(epoll_.get(), events, 4, timeout_ms < 1 ? 1 : timeout_ms);
    for (int i = 0; i < ready; ++i) {
      const int fd = events[i].data.fd;
      if (fd == context_->channel()->fd) {
        DrainChannel();
      } else if (fd == context_->context()->async_fd) {
        std::lock_guard<std::mutex> lock(mu_);
        ReadAsyncEventsLocked();
      } else {
        uint64_t value = 0;
        ssize_t got = read(wake_.get(), &value, sizeof(value));
        (void)got;  // only wakes the loop
      }
    }
  }
}

}  // namespace chorus::ibverbs
