// The progress engine of a verbs device: one thread that polls the shared completion queue and
// hands each completion to the connection of its queue pair, sleeps on the completion channel
// once nothing has completed for the spin budget, reads the device's asynchronous events, and
// ticks the connections' timers (connect deadlines, liveness probes). One mutex guards every
// connection and mesh of the device; the thread holds it while it dispatches.
#ifndef CHORUS_TRANSPORT_IBVERBS_VERBS_ENGINE_H_
#define CHORUS_TRANSPORT_IBVERBS_VERBS_ENGINE_H_

#include <infiniband/verbs.h>

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
#include "chorus/core/socket.h"
#include "chorus/transport/ibverbs/registration_cache.h"
#include "chorus/transport/ibverbs/verbs_context.h"
#include "chorus/transport/ibverbs/verbs_options.h"

namespace chorus::ibverbs {

// What the engine drives; called with the engine's mutex held.
class QueuePairOwner {
 public:
  virtual ~QueuePairOwner() = default;
  virtual void OnCompletion(const ibv_wc& completion) = 0;
  // A fatal asynchronous event on the queue pair, or the port went down.
  virtual void OnFatalEvent(const char* what) = 0;
  virtual void OnTick(absl::Time now) = 0;
  // Resources it waited for (a bounce buffer) may be free now.
  virtual void Pump() = 0;
};

// A registered buffer that a receive reads through when its own buffer cannot be registered.
struct BounceBuffer {
  uint8_t* data = nullptr;
  uint32_t lkey = 0;
};

class VerbsEngine {
 public:
  static constexpr size_t kBounceBytes = size_t{256} << 10;
  static constexpr int kBounceBuffers = 4;

  static absl::StatusOr<std::shared_ptr<VerbsEngine>> Create(std::unique_ptr<VerbsContext> context,
                                                             const VerbsDeviceOptions& options);
  // Stops the thread. Every queue pair owner has detached by then (meshes hold the engine).
  ~VerbsEngine();

  std::mutex& mu() { return mu_; }
  // Signalled (with mu() held) whenever an RDMA read completes: a cancel waits on it for the
  // reads into its buffer to end.
  std::condition_variable& reads_done() { return reads_done_; }
  VerbsContext& context() { return *context_; }
  RegistrationCache& registrations() { return *registrations_; }
  const VerbsDeviceOptions& options() const { return options_; }

  // --- With mu() held ---
  // A number no other owner of this engine gets; it tags the owner's work requests, so that a
  // completion left behind by a destroyed queue pair never reaches a later owner.
  uint32_t NextSerial() { return ++last_serial_; }
  void Attach(uint32_t qp_num, uint32_t serial, QueuePairOwner* owner);
  void Detach(uint32_t qp_num);
  // Room in the shared completion queue for `entries` more outstanding work requests (a queue
  // pair's send and receive depths), growing the queue when needed: a full queue loses
  // completions. InvalidArgument, naming the sizes, where the device allows no larger one.
  absl::Status ReserveCompletions(uint32_t entries);
  void ReleaseCompletions(uint32_t entries) { reserved_completions_ -= entries; }
  // A free bounce buffer, or false while all are in use (one comes back with ReturnBounce).
  bool TakeBounce(BounceBuffer* buffer);
  void ReturnBounce(const BounceBuffer& buffer);

 private:
  VerbsEngine(std::unique_ptr<VerbsContext> context, const VerbsDeviceOptions& options);
  void Run();
  // Polls the completion queue until it is empty; the number of completions.
  int PollLocked();
  void ReadAsyncEventsLocked();
  void DrainChannel();
  void TickLocked(absl::Time now);

  struct Attached {
    uint32_t serial = 0;
    QueuePairOwner* owner = nullptr;
  };

  std::unique_ptr<VerbsContext> context_;
  const VerbsDeviceOptions options_;
  std::unique_ptr<RegistrationCache> registrations_;
  ScopedFd epoll_;
  ScopedFd wake_;

  std::mutex mu_;
  std::condition_variable reads_done_;
  absl::flat_hash_map<uint32_t, Attached> owners_;  // by queue pair number
  uint32_t last_serial_ = 0;
  uint64_t reserved_completions_ = 0;
  std::vector<BounceBuffer> free_bounce_;
  AlignedBytes bounce_memory_;
  MemoryRegion bounce_region_;

  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace chorus::ibverbs

#endif  // CHORUS_TRANSPORT_IBVERBS_VERBS_ENGINE_H_
