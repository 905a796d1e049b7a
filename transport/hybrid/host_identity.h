// Which ranks share a host, as the hybrid transport decides it: ranks whose host identities are
// equal talk through shared memory, all others through the network.
#ifndef CHORUS_TRANSPORT_HYBRID_HOST_IDENTITY_H_
#define CHORUS_TRANSPORT_HYBRID_HOST_IDENTITY_H_

#include <string>

#include "absl/strings/string_view.h"

namespace chorus {

// The detected identity of this process's host: the shared-memory transport's own identity
// (kernel boot id and pid namespace, which decide whether its memfds are reachable) plus the
// network namespace. The network namespace is part of it because a rank in another network
// namespace is, for every purpose above the transport, on another host: a container with its
// own network stack, or (in our tests) a simulated host joined by a veth pair. Grouping such
// ranks as one host would hide exactly the network hop the hierarchical collectives must see;
// the price is that two containers that share a pid namespace but not a network use TCP
// between them, which CHORUS_HOSTID can override. Computed on first use and kept, so a process
// that moves into a namespace must do so before; thread-safe.
const std::string& DetectedHostIdentity();

// The identity this process publishes: `override_id` when not empty, else CHORUS_HOSTID when
// set (like NCCL_HOSTID: ranks given the same value are treated as one host, so they must
// really share the kernel and pid namespace for shared memory to work), else
// DetectedHostIdentity().
std::string ResolveHostIdentity(absl::string_view override_id);

}  // namespace chorus

#endif  // CHORUS_TRANSPORT_HYBRID_HOST_IDENTITY_H_
