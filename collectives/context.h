// One collective call in progress: the algorithm's only window on the transport. It tags
// messages, exchanges and checks headers, waits with the collective's deadline, and turns
// transport errors into messages that name the collective, its sequence number, the peer and
// what to do.
//
// Header protocol: before its first message to a peer the context sends that peer its
// header, and before data received from a peer is used the context has checked that peer's
// header (so a rank never completes with data from a rank that disagrees with it). Each rank
// also sends its header to its right-hand ring neighbour and checks the one from its left
// before it completes, so that any disagreement is seen by at least one rank even when the
// two sides' communication patterns do not meet. A disagreement breaks the communicator
// (CommState::Break): the record in the store and the aborted mesh make every other rank that
// is still inside the collective fail promptly with the same message.
#ifndef CHORUS_COLLECTIVES_CONTEXT_H_
#define CHORUS_COLLECTIVES_CONTEXT_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "chorus/collectives/collective_args.h"
#include "chorus/collectives/comm_state.h"
#include "chorus/collectives/header.h"
#include "chorus/core/deadline.h"
#include "chorus/transport/request.h"

namespace chorus {

// A posted send or receive.
struct Transfer {
  RequestPtr request;
  int peer = -1;
  size_t bytes = 0;  // the length sent, or the exact length a receive expects
  uint64_t step = 0;
  bool is_recv = false;
};

// Used by the one thread that runs the collective; Cancel() may be called from any thread.
class CollectiveContext {
 public:
  CollectiveContext(CommState& comm, const CollectiveArgs& args, const CollectiveHeader& header,
                    Deadline deadline);
  // Cancels whatever is still pending, so no transport touches the buffers afterwards.
  ~CollectiveContext();
  CollectiveContext(const CollectiveContext&) = delete;
  CollectiveContext& operator=(const CollectiveContext&) = delete;

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  const CommTuning& tuning() const { return comm_.tuning(); }
  const CollectiveHeader& header() const { return header_; }

  // Sends the header to the right-hand neighbour and expects one from the left.
  void Start();

  // Post a message of step `step` (numbered by the algorithm from 0). Errors surface in Wait.
  Transfer Send(int peer, uint64_t step, const void* data, size_t bytes);
  Transfer Recv(int peer, uint64_t step, void* data, size_t bytes);

  // Waits until every transfer is done and, for receives, the sender's header is checked.
  absl::Status Wait(const Transfer& transfer) { return WaitAll({&transfer, 1}); }
  absl::Status WaitAll(absl::Span<const Transfer> transfers);

  // True when Wait(transfer) would return at once: done and, for a receive, the sender's
  // header has arrived. Never blocks.
  bool Ready(const Transfer& transfer) const;

  // Waits for every send posted so far and for all expected headers; called once the
  // algorithm has returned OK.
  absl::Status Finish();

  // Ends the collective early with kAborted (Work::Abort). Thread-safe.
  void Cancel();

  // A scratch buffer (contents undefined) owned by the context until it ends.
  uint8_t* Scratch(size_t bytes);

  // "allreduce #17 (ring, 1000 x float32 (3.9 KiB), sum) on rank 2".
  std::string Describe() const;

  // For the flight recorder, from any thread: what the collective waited on last and, per
  // peer, the messages posted and completed, naming peers whose header never arrived (they
  // have not entered this collective). Indented lines, each ending in a newline.
  std::string DescribeProgress() const;

 private:
  struct PeerHeader {
    RequestPtr request;
    CollectiveHeader::Wire wire{};
    bool checked = false;
  };

  Transfer Post(int peer, uint64_t step, size_t bytes, bool is_recv,
                absl::FunctionRef<RequestPtr(Connection&, Tag)> post);
  void SendHeaderTo(int peer);
  void ExpectHeaderFrom(int peer);
  void Register(const Transfer& transfer);
  void NoteWait(const Transfer& transfer);
  absl::Status CheckArrivedHeaders();
  absl::Status CheckHeader(int peer, PeerHeader& header);
  absl::Status Failed(const Transfer& transfer, const absl::Status& status);
  absl::Status WrongLength(const Transfer& transfer, size_t got);
  absl::Status TimedOut(absl::Span<const Transfer> transfers);
  absl::Status Fatal(absl::Status error);
  absl::Status Reported(const absl::Status& published, int peer);

  CommState& comm_;
  const CollectiveArgs& args_;
  const CollectiveHeader header_;
  const CollectiveHeader::Wire header_wire_;
  const Deadline deadline_;
  struct ScratchBuffer {
    std::unique_ptr<uint8_t[]> data;
    size_t capacity;
  };
  std::vector<ScratchBuffer> scratch_;
  std::vector<bool> header_sent_;
  std::map<int, PeerHeader> headers_in_;  // node-based: receive buffers stay put
  int unchecked_headers_ = 0;
  std::vector<Transfer> sends_;

  // The transfer WaitAll blocked on last (peer, step, direction) packed by NoteWait, so that
  // a dump reads it without a lock; 0 before the first wait.
  std::atomic<uint64_t> last_wait_{0};

  mutable std::mutex mu_;
  // Everything posted, headers included: for Cancel and for DescribeProgress.
  std::vector<Transfer> posted_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_CONTEXT_H_
