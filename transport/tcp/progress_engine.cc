#include "chorus/transport/tcp/progress_engine.h"

#include <errno.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"

namespace chorus::tcp {
namespace {

constexpr uint64_t kWakeToken = 0;
constexpr int kMaxEventsPerPoll = 64;
// How long the background thread sleeps in epoll_wait when nothing has a timer; Wake() cuts it
// short for Stop and for waiters that want the token.
constexpr int kIdlePollMs = 1000;
// The background thread stays away this long after the last wait began, so a thread waiting
// in a loop is not interrupted between two waits.
constexpr absl::Duration kBackgroundGrace = absl::Milliseconds(5);

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

absl::StatusOr<std::shared_ptr<ProgressEngine>> ProgressEngine::Create(absl::Duration spin) {
  ScopedFd epoll(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) return InternalError(absl::StrCat("epoll_create1: ", ErrnoText(errno)));
  ScopedFd wake(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake.valid()) return InternalError(absl::StrCat("eventfd: ", ErrnoText(errno)));
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kWakeToken;
  if (epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &event) != 0) {
    return InternalError(absl::StrCat("epoll_ctl(eventfd): ", ErrnoText(errno)));
  }
  return std::shared_ptr<ProgressEngine>(
      new ProgressEngine(std::move(epoll), std::move(wake), spin));
}

ProgressEngine::ProgressEngine(ScopedFd epoll, ScopedFd wake, absl::Duration spin)
    : epoll_(std::move(epoll)), wake_(std::move(wake)), spin_policy_(spin) {}

ProgressEngine::~ProgressEngine() {
  StopBackgroundThread();
  std::lock_guard<std::mutex> lock(mu_);
  retired_.clear();
}

uint64_t ProgressEngine::Register(int fd, uint32_t events, EventHandler* handler) {
  const uint64_t token = next_token_++;
  epoll_event event{};
  event.events = events;
  event.data.u64 = token;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
    // Only possible on resource exhaustion; the socket then never reports and its owner's
    // timers (handshake, connect) end it.
    CHORUS_LOG(kError, "tcp") << "epoll_ctl(ADD, fd " << fd << ") failed: " << ErrnoText(errno);
  }
  handlers_[token] = handler;
  return token;
}

void ProgressEngine::SetInterest(uint64_t token, int fd, uint32_t events) {
  epoll_event event{};
  event.events = events;
  event.data.u64 = token;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &event) != 0) {
    CHORUS_LOG(kError, "tcp") << "epoll_ctl(MOD, fd " << fd << ") failed: " << ErrnoText(errno);
  }
}

void ProgressEngine::Unregister(uint64_t token, int fd) {
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  handlers_.erase(token);
}

void ProgressEngine::MarkReady(uint64_t token) {
  ready_.push_back(token);
  has_ready_.store(true, std::memory_order_release);
}

void ProgressEngine::Retire(std::unique_ptr<EventHandler> object) {
  retired_.push_back(std::move(object));
}

void ProgressEngine::AddTickable(Tickable* tickable) { tickables_.push_back(tickable); }

void ProgressEngine::RemoveTickable(Tickable* tickable) {
  tickables_.erase(std::remove(tickables_.begin(), tickables_.end(), tickable), tickables_.end());
}

void ProgressEngine::RequestTick() {
  const int64_t want = SteadyNowNs() + absl::ToInt64Nanoseconds(kTickInterval);
  int64_t current = next_tick_ns_.load();
  while (want < current && !next_tick_ns_.compare_exchange_weak(current, want)) {
  }
  if (want < current && driver_sleeping_.load()) Wake();
}

void ProgressEngine::BeginWait() {
  wait_epoch_.fetch_add(1);
  waiters_.fetch_add(1);
  // Pairs with the background thread's store-then-check in BackgroundLoop.
  if (background_polling_.load()) Wake();
}

void ProgressEngine::EndWait() { waiters_.fetch_sub(1); }

std::unique_lock<std::mutex> ProgressEngine::LockForPosting() {
  posters_.fetch_add(1);
  std::unique_lock<std::mutex> lock(mu_);
  posters_.fetch_sub(1);
  wait_epoch_.fetch_add(1);
  return lock;
}

bool ProgressEngine::TryAcquireDriver() { return driver_mu_.try_lock(); }

void ProgressEngine::ReleaseDriver() { driver_mu_.unlock(); }

void ProgressEngine::Wake() {
  const uint64_t one = 1;
  const ssize_t ignored = write(wake_.get(), &one, sizeof(one));
  (void)ignored;
}

void ProgressEngine::OnRequestCompleted(const Request* request) {
  // Pairs with PollOnce: the request's done_ was stored and sleeping_for_ is read here, and
  // PollOnce stores sleeping_for_ and then reads done_, all sequentially consistent, so
  // either the driver sees the request done before it sleeps, or this sees it sleeping and
  // wakes it.
  if (sleeping_for_.load(std::memory_order_seq_cst) == request) Wake();
}

int ProgressEngine::CapByNextTick(int timeout_ms) const {
  const int64_t next = next_tick_ns_.load();
  if (next == INT64_MAX) return timeout_ms;
  const int64_t left_ns = next - SteadyNowNs();
  if (left_ns <= 0) return 0;
  const int left_ms = static_cast<int>((left_ns + 999999) / 1000000);
  return timeout_ms < 0 ? left_ms : std::min(timeout_ms, left_ms);
}

void ProgressEngine::RunTicksIfDue() {
  const int64_t now = SteadyNowNs();
  if (now < next_tick_ns_.load()) return;
  int64_t next = INT64_MAX;
  for (Tickable* tickable : tickables_) {
    const absl::Duration delay = tickable->Tick();
    if (delay != absl::InfiniteDuration()) {
      next = std::min(next, now + absl::ToInt64Nanoseconds(std::max(delay, kTickInterval)));
    }
  }
  next_tick_ns_.store(next);
}

void ProgressEngine::PollOnce(int timeout_ms, const Request* waiting_for) {
  int timeout = CapByNextTick(timeout_ms);
  if (has_ready_.load(std::memory_order_acquire)) timeout = 0;
  if (timeout != 0) {
    sleeping_for_.store(waiting_for, std::memory_order_seq_cst);
    driver_sleeping_.store(true);
    if (waiting_for != nullptr && waiting_for->IsDoneAfterStore()) timeout = 0;
  }
  epoll_event events[kMaxEventsPerPoll];
  int count = epoll_wait(epoll_.get(), events, kMaxEventsPerPoll, timeout);
  sleeping_for_.store(nullptr);
  driver_sleeping_.store(false);
  if (count < 0) {
    if (errno != EINTR) {
      CHORUS_LOG(kError, "tcp") << "epoll_wait failed: " << ErrnoText(errno);
    }
    count = 0;
  }
  if (count == 0 && !has_ready_.load(std::memory_order_acquire) &&
      SteadyNowNs() < next_tick_ns_.load()) {
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = 0; i < count; ++i) {
    const uint64_t token = events[i].data.u64;
    if (token == kWakeToken) {
      uint64_t value = 0;
      const ssize_t ignored = read(wake_.get(), &value, sizeof(value));
      (void)ignored;
      continue;
    }
    // A handler may have unregistered another one whose event is later in this batch.
    const auto it = handlers_.find(token);
    if (it != handlers_.end()) it->second->OnEvents(events[i].events);
  }
  // Handlers marked ready during this loop run in the next pass (without sleeping), so a
  // handler that keeps marking itself cannot starve the others.
  std::vector<uint64_t> ready;
  ready.swap(ready_);
  has_ready_.store(false, std::memory_order_release);
  for (const uint64_t token : ready) {
    const auto it = handlers_.find(token);
    if (it != handlers_.end()) it->second->OnEvents(EPOLLIN);
  }
  if (!ready_.empty()) has_ready_.store(true, std::memory_order_release);
  RunTicksIfDue();
  retired_.clear();
}

bool ProgressEngine::ReadHandler(uint64_t token) {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  const auto it = handlers_.find(token);
  if (it == handlers_.end() || !it->second->OnlyReads()) return false;
  it->second->OnEvents(EPOLLIN);
  retired_.clear();
  return true;
}

void ProgressEngine::StartBackgroundThread(int log_rank) {
  background_ = std::thread([this, log_rank] { BackgroundLoop(log_rank); });
}

void ProgressEngine::StopBackgroundThread() {
  {
    std::lock_guard<std::mutex> lock(background_mu_);
    stop_ = true;
  }
  background_cv_.notify_all();
  Wake();
  if (background_.joinable()) background_.join();
}

void ProgressEngine::BackgroundLoop(int log_rank) {
  SetThreadLogRank(log_rank);
  uint64_t seen_epoch = wait_epoch_.load();
  while (true) {
    {
      std::unique_lock<std::mutex> lock(background_mu_);
      while (!stop_) {
        const uint64_t epoch = wait_epoch_.load();
        if (waiters_.load() == 0 && posters_.load() == 0 && epoch == seen_epoch) break;
        seen_epoch = epoch;
        background_cv_.wait_for(lock, absl::ToChronoNanoseconds(kBackgroundGrace));
      }
      if (stop_) return;
    }
    driver_mu_.lock();
    background_polling_.store(true);
    // Pairs with BeginWait: a waiter that arrived before the store above is seen here; one
    // that arrives after it sees background_polling_ and wakes the poll.
    if (waiters_.load() == 0 && posters_.load() == 0) PollOnce(kIdlePollMs, nullptr);
    background_polling_.store(false);
    driver_mu_.unlock();
  }
}

}  // namespace chorus::tcp
