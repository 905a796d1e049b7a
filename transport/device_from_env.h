// Creating the device a user asks for by name: CHORUS_TRANSPORT=auto|tcp|shm|ibverbs, or a
// tool's --transport flag.
//
//   auto     the hybrid device (transport/hybrid/): shared memory to ranks on this host, and to
//            ranks on other hosts verbs when an RDMA port is active, else TCP (logged)
//   tcp      TCP to every peer, also on this host
//   shm      shared memory to every peer (all ranks on one host)
//   ibverbs  InfiniBand verbs (InfiniBand or RoCE) to every peer, also on this host
//
// Every rank of a job must make the same choice: a mesh's ranks exchange addresses of one kind.
#ifndef CHORUS_TRANSPORT_DEVICE_FROM_ENV_H_
#define CHORUS_TRANSPORT_DEVICE_FROM_ENV_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chorus/transport/tcp/tcp_options.h"
#include "chorus/transport/transport.h"

namespace chorus {

// OK for "tcp", "shm", "ibverbs" and "auto"; kInvalidArgument listing them otherwise.
absl::Status CheckTransportName(absl::string_view transport);

// The device `transport` names. TCP devices (also the network side of "auto") use
// `tcp_options`; shared-memory devices take their options from the CHORUS_SHM_* variables,
// verbs devices from the CHORUS_IB_* variables, and the hybrid device its host from
// CHORUS_HOSTID. kInvalidArgument for an unknown name or
// malformed options.
absl::StatusOr<std::unique_ptr<Device>> CreateDeviceByName(
    absl::string_view transport, const tcp::TcpDeviceOptions& tcp_options);

// The transport CHORUS_TRANSPORT names, or `fallback` when it is unset (the one reader of the
// variable).
std::string TransportFromEnvironment(absl::string_view fallback);

// CreateDeviceByName(TransportFromEnvironment("auto"), TcpDeviceOptions::FromEnv()); errors
// about the name name the variable.
absl::StatusOr<std::unique_ptr<Device>> CreateDeviceFromEnv();

}  // namespace chorus

#endif  // CHORUS_TRANSPORT_DEVICE_FROM_ENV_H_
