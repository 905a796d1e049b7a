// A pending send or receive. Transports create requests and complete them; callers wait on
// them, test them and cancel them.
#ifndef CHORUS_TRANSPORT_REQUEST_H_
#define CHORUS_TRANSPORT_REQUEST_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "chorus/core/deadline.h"

namespace chorus {

// Messages are matched by (peer, tag); messages with the same (peer, tag) are delivered in
// the order they were sent. The transport treats the tag as opaque; the collectives layer packs
// (communicator, sequence number, step) into it.
using Tag = uint64_t;

enum class RequestKind { kSend, kRecv };

// Thread-safe. A request completes exactly once, with OK or an error; after it is done (or
// after Cancel() returns) the transport never touches its buffer again.
class Request {
 public:
  Request(RequestKind kind, int peer, Tag tag) : kind_(kind), peer_(peer), tag_(tag) {}
  virtual ~Request() = default;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  RequestKind kind() const { return kind_; }
  Tag tag() const { return tag_; }

  // The peer rank. For a receive posted on several peers (Mesh::RecvFromAny) this is -1 until
  // the request completes, then the rank whose message it took.
  int peer() const { return peer_.load(std::memory_order_acquire); }

  // Non-blocking: true once the request has completed, successfully or not.
  bool IsDone() const { return done_.load(std::memory_order_acquire); }
  // IsDone as a sequentially consistent load, for a thread that stored (sequentially
  // consistent) that it is about to sleep on this request just before it looks: Complete's
  // store of done_ is sequentially consistent too, so of the two either the completing thread
  // sees the sleeper or the sleeper sees the request done (ProgressEngine::PollOnce).
  bool IsDoneAfterStore() const { return done_.load(std::memory_order_seq_cst); }

  // The outcome; only meaningful once IsDone().
  absl::Status status() const;

  // Bytes moved: for a receive, the length of the message that arrived (<= capacity).
  size_t bytes() const { return bytes_.load(std::memory_order_acquire); }

  // Waits until done or `deadline`. Returns status() when done; kDeadlineExceeded naming the
  // peer and tag otherwise (the request stays pending: cancel it or wait again). Transports
  // may override to drive progress on the calling thread; the default spins briefly (a
  // wake-up costs tens of microseconds on virtual machines) and then blocks.
  virtual absl::Status Wait(Deadline deadline);

  // Completes a pending request with kAborted. When Cancel() returns the transport no longer
  // touches the buffer. No effect on a request that is already done.
  virtual void Cancel() = 0;

  // Runs `observer` once the request completes: on the completing thread, or at once on this
  // one if it already has. The completing thread may hold a transport's lock, so the observer
  // must neither block nor call into a transport. At most one observer per request.
  void OnCompletion(std::function<void()> observer);

  // --- For transports ---
  // Marks the request done with `status` and `bytes`; returns false if it was already done
  // (for example cancelled). `peer` is set for requests posted on several peers.
  bool Complete(absl::Status status, size_t bytes, int peer = -1);

 protected:
  // Spins, then blocks, until done or deadline; true if done. Subclasses that drive progress
  // in Wait() call it between polls.
  bool AwaitDone(Deadline deadline);

 private:
  void RunObserver();  // runs the observer if nobody has yet

  const RequestKind kind_;
  std::atomic<int> peer_;
  const Tag tag_;
  std::atomic<bool> done_{false};
  std::atomic<size_t> bytes_{0};
  // std::mutex rather than absl::Mutex: the system Abseil is not built with ThreadSanitizer,
  // which then cannot see absl::Mutex's ordering and reports false races.
  std::mutex mu_;  // only for done_cv_
  std::condition_variable done_cv_;
  std::atomic<int> blocked_waiters_{0};  // threads in AwaitDone's blocking part
  std::atomic<bool> claimed_{false};     // the first Complete() wins
  std::atomic<bool> observed_{false};    // an observer was set (read without the lock)
  std::function<void()> observer_;       // guarded by mu_; whoever moves it out runs it
  absl::Status status_;                  // written by the winner before done_; immutable after
};

using RequestPtr = std::shared_ptr<Request>;

// Waits for every request in order and returns at the first error (a failed request or the
// deadline), so a dead peer is reported at once; requests still pending then stay pending.
absl::Status WaitAll(absl::Span<const RequestPtr> requests, Deadline deadline);

// Cancels every request that is still pending.
void CancelAll(absl::Span<const RequestPtr> requests);

// How long a thread waiting for a request polls before it sleeps: CHORUS_SPIN_US for every
// transport, 50 us by default. Blocking and waking a thread costs tens of microseconds on
// virtual machines, more than a small message takes to arrive.
inline constexpr absl::Duration kDefaultWaitSpin = absl::Microseconds(50);
// The spin of one transport: microseconds from `transport_variable` (CHORUS_TCP_SPIN_US,
// CHORUS_SHM_SPIN_US) when set, else CHORUS_SPIN_US, else kDefaultWaitSpin; empty for
// CHORUS_SPIN_US alone. InvalidArgument naming the variable when a value is not a whole
// number from 0 to 1000000.
absl::StatusOr<absl::Duration> WaitSpinFromEnv(absl::string_view transport_variable = {});

// A request that is already done with `status` (an error): stands in for one that could not
// even be posted, so the error reaches the caller through the same Wait path as every other.
RequestPtr MakeFailedRequest(RequestKind kind, int peer, Tag tag, absl::Status status);

}  // namespace chorus

#endif  // CHORUS_TRANSPORT_REQUEST_H_
