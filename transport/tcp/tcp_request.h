// The TCP transport's request: Wait drives the device's progress engine on the calling thread
// (see progress_engine.h), Cancel detaches the request from its connection under the engine's
// mutex so that the buffer is never touched once it returns.
#ifndef CHORUS_TRANSPORT_TCP_TCP_REQUEST_H_
#define CHORUS_TRANSPORT_TCP_TCP_REQUEST_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "chorus/transport/request.h"
#include "chorus/transport/tcp/progress_engine.h"

namespace chorus::tcp {

class TcpRequest;

// Where a pending request is queued (a connection, or a mesh for RecvFromAny). Called with
// the engine's mutex held, for a request that is not done: forget the request and make sure
// its buffer is never touched again.
class RequestOwner {
 public:
  virtual ~RequestOwner() = default;
  virtual void CancelLocked(TcpRequest& request) = 0;
};

// Thread-safe (see Request).
class TcpRequest : public Request {
 public:
  // `peer_label` names the peer in error messages: "rank 3 (10.0.0.4:5000)"; shared, so that a
  // connection posts requests without copying its label.
  TcpRequest(RequestKind kind, int peer, Tag tag, std::shared_ptr<ProgressEngine> engine,
             std::shared_ptr<const std::string> peer_label);

  absl::Status Wait(Deadline deadline) override;
  void Cancel() override;

  // --- For the transport, with the engine's mutex held ---
  void set_owner(RequestOwner* owner) { owner_ = owner; }
  // Completes the request (see Request::Complete) and wakes a thread sleeping on it.
  bool Finish(absl::Status status, size_t bytes, int peer = -1);
  const std::string& peer_label() const { return *peer_label_; }
  // The engine token of the socket a pending receive's message arrives on, when known: its
  // waiter reads that socket directly between polls of the whole engine.
  void set_read_hint(uint64_t token) { read_hint_.store(token, std::memory_order_relaxed); }

 private:
  const std::shared_ptr<ProgressEngine> engine_;
  const std::shared_ptr<const std::string> peer_label_;
  RequestOwner* owner_ = nullptr;       // guarded by engine_->mu(); valid while not done
  std::atomic<uint64_t> read_hint_{0};  // 0: none
};

}  // namespace chorus::tcp

#endif  // CHORUS_TRANSPORT_TCP_TCP_REQUEST_H_
