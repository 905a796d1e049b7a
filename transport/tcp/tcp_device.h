// The TCP transport: a Device listening on one address, with meshes whose connections are
// sockets to their peers. See docs/transport-tcp.md for the protocol, the threading and the
// environment variables.
#ifndef CHORUS_TRANSPORT_TCP_TCP_DEVICE_H_
#define CHORUS_TRANSPORT_TCP_TCP_DEVICE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "chorus/transport/tcp/tcp_options.h"
#include "chorus/transport/transport.h"

namespace chorus::tcp {

// Picks the address to listen on: `options.address` if set, else an interface address by
// `options.interfaces` and `options.family` (default: the first interface that is not
// loopback or docker, falling back to loopback). Port `options.port`. InvalidArgument with
// the interfaces that exist when nothing matches.
absl::StatusOr<SocketAddress> SelectListenAddress(const TcpDeviceOptions& options);

// Creates a device listening on SelectListenAddress(options) (the address is logged at info)
// with its background progress thread running. Meshes created from it may outlive it; their
// requests then progress only while someone waits on them.
absl::StatusOr<std::unique_ptr<Device>> CreateTcpDevice(const TcpDeviceOptions& options);

// A TCP link as calibrated on loopback. Each byte pays two kernel copies whatever the segment,
// so segments larger than 1 MiB gain nothing (docs/benchmarks.md, "Why the defaults are what
// they are"); where ranks pass data on from link to link, half that lets each start on its
// copies sooner. A message of its own costs a system call on each side and, on a busy machine,
// a wake-up; copying 16 KiB costs under a microsecond.
inline constexpr LinkProfile kTcpLink = {25.0,
                                         1.3,
                                         0.1,
                                         size_t{1} << 20,
                                         size_t{16} << 10,
                                         /*eager_sends=*/true,
                                         /*relay_segment_bytes=*/size_t{512} << 10};

// CreateTcpDevice(TcpDeviceOptions::FromEnv()).
absl::StatusOr<std::unique_ptr<Device>> CreateTcpDeviceFromEnv();

}  // namespace chorus::tcp

#endif  // CHORUS_TRANSPORT_TCP_TCP_DEVICE_H_
