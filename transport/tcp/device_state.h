// What a TCP device shares with its meshes; it lives until the device and every mesh are gone,
// so a mesh may outlive its device (it then has no background thread: waits drive progress).
#ifndef CHORUS_TRANSPORT_TCP_DEVICE_STATE_H_
#define CHORUS_TRANSPORT_TCP_DEVICE_STATE_H_

#include <cstdint>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "chorus/transport/tcp/buffer_pool.h"
#include "chorus/transport/tcp/progress_engine.h"
#include "chorus/core/socket.h"
#include "chorus/transport/tcp/tcp_options.h"

namespace chorus::tcp {

class TcpMesh;

struct DeviceState {
  std::shared_ptr<ProgressEngine> engine;
  TcpDeviceOptions options;
  SocketAddress listen_address;
  // Buffers of unexpected messages, reused across the device's connections.
  std::shared_ptr<BufferPool> unexpected_buffers;
  // Meshes by the id their handshakes carry. Guarded by engine->mu().
  absl::flat_hash_map<uint64_t, TcpMesh*> meshes;
};

// A random non-zero 64-bit id (mesh ids, dial ids) from the kernel's generator.
uint64_t RandomId();

}  // namespace chorus::tcp

#endif  // CHORUS_TRANSPORT_TCP_DEVICE_STATE_H_
