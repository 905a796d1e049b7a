// The progress engine of a TCP device: one epoll set over every socket of the device, the
// mutex that guards all transport state, and the rules for which thread polls.
//
// Threading. All sockets are non-blocking and level-triggered. Every handler runs with mu()
// held, so the transport's state (meshes, connections, streams, queues) has one lock and no
// lock ordering to get wrong. Polling (epoll_wait) happens outside mu() by at most one thread
// at a time, the "driver", which holds the driver token:
//   - a thread waiting on a request (TcpRequest::Wait) drives itself when the token is free:
//     it polls without sleeping for as long as the spin policy says (spin_policy.h; the budget
//     is TcpDeviceOptions::spin), yielding the core every few polls, then blocks in
//     epoll_wait until its deadline. A message then wakes the
//     very thread that waits for it: one kernel wake-up per message, no hand-off between
//     threads.
//   - a background thread drives when nobody waits (accepting connections, draining sockets
//     into unexpected-message buffers, noticing a dead peer). It steps aside while threads
//     wait and for a grace period after each wait, so a thread that waits in a loop keeps the
//     token to itself.
// Posting threads never poll: they take mu(), make one write and return.
#ifndef CHORUS_TRANSPORT_TCP_PROGRESS_ENGINE_H_
#define CHORUS_TRANSPORT_TCP_PROGRESS_ENGINE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chorus/core/deadline.h"
#include "chorus/core/socket.h"
#include "chorus/transport/request.h"
#include "chorus/transport/spin_policy.h"

namespace chorus::tcp {

// Something registered with the engine for socket readiness. OnEvents runs with the engine's
// mu() held; `events` are EPOLL* bits (a handler marked ready by MarkReady gets EPOLLIN).
class EventHandler {
 public:
  virtual ~EventHandler() = default;
  virtual void OnEvents(uint32_t events) = 0;
  // Whether OnEvents(EPOLLIN) now does all the handler would do on any event: it waits to
  // read, not to write (ReadHandler).
  virtual bool OnlyReads() const { return false; }
};

// Something with timers (dial retries, handshake timeouts). Tick runs with mu() held and
// returns how soon it wants the next tick (absl::InfiniteDuration() when it has nothing
// pending).
class Tickable {
 public:
  virtual ~Tickable() = default;
  virtual absl::Duration Tick() = 0;
};

// Thread-safe as described above. Methods marked "mu() held" must be called with mu() held.
class ProgressEngine {
 public:
  // The interval of timer ticks while any Tickable has something pending.
  static constexpr absl::Duration kTickInterval = absl::Milliseconds(10);

  static absl::StatusOr<std::shared_ptr<ProgressEngine>> Create(absl::Duration spin);
  ~ProgressEngine();
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  std::mutex& mu() { return mu_; }
  // Takes mu() for a thread that posts or cancels (not a driver). The background thread does
  // not start a poll pass while such a thread waits for mu() and stays away for its grace
  // period afterwards: std::mutex is not fair, and a background thread that re-locks mu() pass
  // after pass while it drains a busy socket into unexpected-message buffers would otherwise
  // starve the rank's own thread for tens of milliseconds, so that neither side posts.
  std::unique_lock<std::mutex> LockForPosting();
  // How long a waiter polls before it sleeps in epoll_wait (TcpRequest::Wait).
  SpinPolicy& spin_policy() { return spin_policy_; }

  // --- Registration (mu() held) ---
  // Adds `fd` with interest `events` (EPOLLIN/EPOLLOUT); returns the handler's token.
  uint64_t Register(int fd, uint32_t events, EventHandler* handler);
  void SetInterest(uint64_t token, int fd, uint32_t events);
  // Removes the handler; events already fetched for it are dropped. Close `fd` afterwards.
  void Unregister(uint64_t token, int fd);
  // Runs the handler's OnEvents(EPOLLIN) in the current or next poll pass even if its socket
  // has nothing new (it has bytes of its own left to process).
  void MarkReady(uint64_t token);
  // Keeps `object` alive until the current poll pass ends: handlers that close themselves
  // from inside OnEvents hand themselves over here instead of deleting themselves.
  void Retire(std::unique_ptr<EventHandler> object);
  void AddTickable(Tickable* tickable);
  void RemoveTickable(Tickable* tickable);
  // Asks for a tick within kTickInterval (something with a timer was created).
  void RequestTick();

  // --- Waiting (see TcpRequest::Wait) ---
  void BeginWait();
  void EndWait();
  // Takes the driver token if free; the holder may call PollOnce and must ReleaseDriver.
  bool TryAcquireDriver();
  void ReleaseDriver();
  // One pass: epoll_wait for up to `timeout_ms` (0: don't sleep; capped by the next tick),
  // then handle every event, ready handler and due tick. `waiting_for` (may be null) is the
  // request the caller waits for; completing it from another thread wakes the poll.
  void PollOnce(int timeout_ms, const Request* waiting_for);
  // Runs the handler of `token` as if its socket were readable, without asking epoll, and
  // returns true: a waiter that knows which socket its receive arrives on reads it with one
  // system call instead of two (epoll_wait, then the read). False, having done nothing, when
  // the handler also waits to write (the caller polls the engine instead), is gone, or
  // another thread holds mu().
  bool ReadHandler(uint64_t token);
  // Called after a request completes: wakes the driver if it sleeps waiting for exactly this
  // request and the completion happened outside its poll (a Cancel, an Abort, a failure seen
  // by a posting thread).
  void OnRequestCompleted(const Request* request);
  // Interrupts a sleeping epoll_wait.
  void Wake();

  // --- Background thread ---
  // Starts the thread that drives while nobody waits; its log lines carry `log_rank`.
  void StartBackgroundThread(int log_rank);
  // Stops and joins it. Idempotent.
  void StopBackgroundThread();

 private:
  ProgressEngine(ScopedFd epoll, ScopedFd wake, absl::Duration spin);
  void BackgroundLoop(int log_rank);
  int CapByNextTick(int timeout_ms) const;
  void RunTicksIfDue();

  const ScopedFd epoll_;
  const ScopedFd wake_;
  SpinPolicy spin_policy_;

  // Guards every piece of transport state of the device (see above), including these.
  // std::mutex rather than absl::Mutex: Debian's Abseil is built without ThreadSanitizer
  // annotations, so TSan cannot see absl::Mutex synchronize.
  std::mutex mu_;
  uint64_t next_token_ = 1;
  absl::flat_hash_map<uint64_t, EventHandler*> handlers_;
  std::vector<uint64_t> ready_;
  std::atomic<bool> has_ready_{false};
  std::vector<std::unique_ptr<EventHandler>> retired_;
  std::vector<Tickable*> tickables_;
  // Steady-clock nanoseconds of the next tick; INT64_MAX when none is pending.
  std::atomic<int64_t> next_tick_ns_{INT64_MAX};

  std::mutex driver_mu_;  // the driver token
  // The request the driver sleeps in epoll_wait for (nullptr: none, or the background thread).
  std::atomic<const Request*> sleeping_for_{nullptr};
  std::atomic<bool> driver_sleeping_{false};
  std::atomic<int> waiters_{0};
  std::atomic<int> posters_{0};  // threads inside LockForPosting
  std::atomic<uint64_t> wait_epoch_{0};

  std::mutex background_mu_;
  std::condition_variable background_cv_;
  bool stop_ = false;  // guarded by background_mu_
  std::atomic<bool> background_polling_{false};
  std::thread background_;
};

}  // namespace chorus::tcp

#endif  // CHORUS_TRANSPORT_TCP_PROGRESS_ENGINE_H_
