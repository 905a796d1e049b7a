// An in-process transport. Every mesh created through an InprocDevice (by threads of one
// process, each with its own device or sharing one) joins a "fabric" identified by an id that
// rank 0 publishes through the store; sends and receives of the fabric's ranks are matched in
// shared queues and the payload is copied once, straight from the send buffer into the posted
// receive buffer (a send completes when its message has been copied).
//
// It obeys the contract of transport/transport.h: FIFO per (peer, tag); a message longer than
// the posted buffer fails the receive with kInvalidArgument and is discarded; Cancel, Abort
// and Mesh::RecvFromAny. Ranks in different processes cannot meet: CreateMesh fails with a
// message saying so. Meshes are never "connecting": a peer that has not joined yet simply has
// its messages queued, so MeshOptions::connect_timeout is not used.
#ifndef CHORUS_TRANSPORT_INPROC_INPROC_DEVICE_H_
#define CHORUS_TRANSPORT_INPROC_INPROC_DEVICE_H_

#include <memory>
#include <string>

#include "chorus/transport/transport.h"

namespace chorus {

// Thread-safe. Stateless apart from its address: all shared state lives in the fabrics, which
// live as long as one of their meshes does.
class InprocDevice : public Device {
 public:
  absl::string_view kind() const override { return "inproc"; }
  std::string address() const override;
  // A hand-off between threads of one process, as calibrated here.
  DeviceLinks Links() const override { return {kInprocLink, kInprocLink}; }

  static constexpr LinkProfile kInprocLink = {15.0, 0.075, 0.1, size_t{1} << 20, size_t{1} << 10};
  absl::StatusOr<std::unique_ptr<Mesh>> CreateMesh(Store& store, int rank, int size,
                                                   const MeshOptions& options,
                                                   Deadline deadline) override;
};

}  // namespace chorus

#endif  // CHORUS_TRANSPORT_INPROC_INPROC_DEVICE_H_
