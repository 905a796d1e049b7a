// The InfiniBand verbs transport: a Device on one RDMA port (InfiniBand or RoCE), with meshes
// whose connections are reliable-connected queue pairs. See docs/transport-ibverbs.md for the
// protocol, the threading, the failure handling and the environment variables.
#ifndef CHORUS_TRANSPORT_IBVERBS_VERBS_DEVICE_H_
#define CHORUS_TRANSPORT_IBVERBS_VERBS_DEVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "chorus/transport/ibverbs/verbs_options.h"
#include "chorus/transport/transport.h"

namespace chorus::ibverbs {

// Opens the device and port `options` name (the first active port by default) and starts its
// progress thread. kPeerUnavailable when there is no RDMA device or no active port,
// kInvalidArgument when a named device, port, GID index or MTU does not fit what the device
// has; each error names what was found.
absl::StatusOr<std::unique_ptr<Device>> CreateVerbsDevice(const VerbsDeviceOptions& options);

// CreateVerbsDevice(VerbsDeviceOptions::FromEnv()).
absl::StatusOr<std::unique_ptr<Device>> CreateVerbsDeviceFromEnv();

// Whether some RDMA device has an active port (what CHORUS_TRANSPORT=auto asks), without
// keeping anything open. When not, `why_not` (if given) says so, or that libibverbs cannot be
// loaded.
bool ActiveRdmaPortExists(std::string* why_not = nullptr);

// A verbs link as modelled for a 100 Gbit/s adapter (docs/transport-ibverbs.md): a few
// microseconds per message, zero copies for large messages, so large segments pay.
inline constexpr LinkProfile kVerbsLink = {
    3.0, 0.08, 0.1, size_t{4} << 20, size_t{1} << 10, /*eager_sends=*/true};

}  // namespace chorus::ibverbs

#endif  // CHORUS_TRANSPORT_IBVERBS_VERBS_DEVICE_H_
