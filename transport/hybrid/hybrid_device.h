// The hybrid transport: shared memory to the ranks on this host, the network to all others,
// chosen per peer from host identities exchanged through the store. See
// docs/transport-hybrid.md.
//
//   auto device = chorus::CreateHybridDevice(*chorus::shm::CreateShmDevice(),
//                                            *chorus::tcp::CreateTcpDeviceFromEnv());
//   auto mesh = (*device)->CreateMesh(store, rank, size, {}, deadline);
//
// Every rank of a mesh must use a hybrid device (they all publish a host identity and read
// everyone's).
#ifndef CHORUS_TRANSPORT_HYBRID_HYBRID_DEVICE_H_
#define CHORUS_TRANSPORT_HYBRID_HYBRID_DEVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "chorus/transport/transport.h"

namespace chorus {

struct HybridOptions {
  // Which host this rank is on, as ResolveHostIdentity() (host_identity.h) takes it: empty
  // means CHORUS_HOSTID, else the detected identity. Ranks with equal ids use `local` between
  // them. Tests that run ranks as threads of one process set it per rank.
  std::string host_id;
};

// Creates a device whose meshes route same-host peers to meshes of `local` (shared memory)
// and the other peers to meshes of `network` (TCP). Its kind() is "hybrid". Thread-safe like
// the devices it holds.
absl::StatusOr<std::unique_ptr<Device>> CreateHybridDevice(std::unique_ptr<Device> local,
                                                           std::unique_ptr<Device> network,
                                                           const HybridOptions& options = {});

}  // namespace chorus

#endif  // CHORUS_TRANSPORT_HYBRID_HYBRID_DEVICE_H_
