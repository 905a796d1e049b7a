// Which TCP congestion control a link's sockets use (TcpDeviceOptions::congestion,
// CHORUS_TCP_CONGESTION).
//
// Between two ranks of one host the kernel's default can be the wrong choice. BBR, a common
// default, sizes its window from the path's bandwidth and round trip; over loopback the round
// trip is a few microseconds, so the window is a fraction of a large message and the message
// waits for acknowledgements, which the receiving rank sends only as it reads. A loss-based
// algorithm (cubic, reno) opens its window until something is lost, which over loopback does
// not happen, and a whole message goes at once. So `auto` gives same-host links cubic (reno
// where the kernel does not let this process choose cubic: UseSameHostCongestionControl) and
// leaves links between hosts to the system default, the operator's choice for that network.
// Same-host links also keep the default while the host's ranks outnumber its cores: then the
// cores, not the window, hold a transfer back, and 4 and 8 ranks on 2 cores measured 1 MiB
// allreduces up to 1.4x slower with cubic than with BBR.
#ifndef CHORUS_TRANSPORT_TCP_CONGESTION_H_
#define CHORUS_TRANSPORT_TCP_CONGESTION_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace chorus::tcp {

// Links between ranks of one host that have a core each get a loss-based algorithm; the
// others keep the system default.
inline constexpr absl::string_view kCongestionAuto = "auto";
// Every link keeps the system default (net.ipv4.tcp_congestion_control).
inline constexpr absl::string_view kCongestionSystem = "system";

// `auto`, `system` or an algorithm's name as the kernel spells it (15 characters at most,
// lower-case letters, digits and '_'); InvalidArgument naming CHORUS_TCP_CONGESTION otherwise.
absl::Status ValidateCongestionSetting(absl::string_view setting);

// Applies `setting` to a TCP socket; `same_host` says whether it joins two ranks of one host
// that have a core each (TcpMesh::SameHostLinkWithCores). A named
// algorithm the kernel refuses is an InvalidArgument naming the variable and what the kernel
// allows; `auto` falls back silently, since the default still works, only slower.
absl::Status ApplyCongestionControl(int fd, absl::string_view setting, bool same_host);

}  // namespace chorus::tcp

#endif  // CHORUS_TRANSPORT_TCP_CONGESTION_H_
