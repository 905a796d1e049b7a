// A request of the shm transport: a send or receive, and where the engine keeps its progress.
#ifndef CHORUS_TRANSPORT_SHM_SHM_REQUEST_H_
#define CHORUS_TRANSPORT_SHM_SHM_REQUEST_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "chorus/transport/receive_claim.h"
#include "chorus/transport/request.h"
#include "chorus/transport/transport.h"

namespace chorus::shm {

class Engine;

// A send or receive of the shm transport. Thread-safe like every Request; the fields below the
// base class belong to the engine and its parts and are guarded by the engine's mutex (as is
// Store). Its methods are defined with the engine (engine.cc), which they drive.
class ShmRequest final : public Request {
 public:
  ShmRequest(std::shared_ptr<Engine> engine, RequestKind kind, int peer, Tag tag, char* data,
             size_t size);

  // Drives the engine's progress on the calling thread, then sleeps on the doorbell.
  absl::Status Wait(Deadline deadline) override;
  void Cancel() override;

 private:
  friend class Engine;
  friend class InboundStreams;
  friend class PeerOutbound;
  enum class Stage {
    kNew,
    kQueued,     // send: waiting for ring space or a rendezvous slot
    kAnnounced,  // send: descriptor in the ring; the receiver reads it, streams it or drops it
    kStreaming,  // send: pushing staging chunks; receive: taking them
    kPosted,     // receive: waiting for a message
    kDone,
  };

  // Receive: puts received bytes where it wants them, its sink, else its buffer.
  void Store(uint64_t offset, const char* data, uint64_t length);

  const std::shared_ptr<Engine> engine_;
  char* data_;  // the caller's buffer, or private_copy_ once a streaming send is cancelled
  const size_t size_;
  std::unique_ptr<char[]> private_copy_;
  RecvSink* sink_ = nullptr;  // receive: takes eager and staged bytes in place of data_
  Stage stage_ = Stage::kNew;
  std::vector<int> any_peers_;  // Mesh::RecvFromAny: every peer it is posted on
  // Mesh::RecvFromAnyPart: the claim shared with the receive's parts on other meshes.
  std::shared_ptr<ReceiveClaim> claim_;
  int part_ = 0;
  int slot_ = -1;          // send: rendezvous slot while announced or streaming
  uint32_t slot_ref_ = 0;  // send: that slot; receive: the stream it takes
  int source_ = -1;        // receive through staging: the sending rank
  uint64_t streamed_ = 0;  // send through staging: bytes pushed so far
};

}  // namespace chorus::shm

#endif  // CHORUS_TRANSPORT_SHM_SHM_REQUEST_H_
