// The verbs transport's request: Cancel goes to whoever holds the request (its connection or,
// for a receive from any of several peers still unmatched, its mesh) under the engine's mutex.
#ifndef CHORUS_TRANSPORT_IBVERBS_VERBS_REQUEST_H_
#define CHORUS_TRANSPORT_IBVERBS_VERBS_REQUEST_H_

#include <memory>
#include <mutex>
#include <string>

#include "chorus/transport/ibverbs/verbs_engine.h"
#include "chorus/transport/request.h"

namespace chorus::ibverbs {

class VerbsRequest;
struct RecvSlot;
struct Outbound;

// Called with the engine's mutex held (as `lock`) for a request that is not done; returns with
// the request done and its buffer no longer touched. May wait on the engine's condition
// variables through `lock`.
class CancelTarget {
 public:
  virtual ~CancelTarget() = default;
  virtual void CancelLocked(VerbsRequest& request, std::unique_lock<std::mutex>& lock) = 0;
};

class VerbsRequest : public Request {
 public:
  VerbsRequest(RequestKind kind, int peer, Tag tag, std::shared_ptr<VerbsEngine> engine)
      : Request(kind, peer, tag), engine_(std::move(engine)) {}

  void Cancel() override {
    std::unique_lock<std::mutex> lock(engine_->mu());
    if (IsDone() || target_ == nullptr) return;
    target_->CancelLocked(*this, lock);
  }

  // --- With the engine's mutex held ---
  void set_target(CancelTarget* target) { target_ = target; }
  // What the request is: its receive slot or its outgoing message (guarded by the mutex).
  std::weak_ptr<RecvSlot> recv_slot;
  std::weak_ptr<Outbound> outbound;

 private:
  const std::shared_ptr<VerbsEngine> engine_;
  CancelTarget* target_ = nullptr;  // valid while the request is not done
};

}  // namespace chorus::ibverbs

#endif  // CHORUS_TRANSPORT_IBVERBS_VERBS_REQUEST_H_
