// Which TCP congestion control a link's sockets use (TcpDeviceOptions::congestion,
// CHORUS_TCP_CONGESTION).
//
// Between two ranks of one host the kernel's default can be the wrong choice. BBR, a common
// default, sizes its window from the path's bandwidth and round trip; over loopback the round
// trip is a few microseconds, so the window is a fraction of a large message and the message
// waits for acknowledgements, which the receiving rank sends only as it reads. A loss-based
// algorithm (cubic, reno) opens its window until something is lost, which over loopback
// nothing is (segments are only reordered at times), and a whole message goes at once. So
// `auto` gives same-host links Reno while the host's ranks have a core each (why not cubic:
// UseSameHostCongestionControl) and leaves links between hosts to the system default, the
// operator's choice for that network.
// While the host's ranks outnumber its cores, a same-host link chooses message by message
// instead (SizeSwitchedCongestion): the system default for a message that fits in BBR's window
// over loopback (about 1 MB), which goes at once under either and measured faster under the
// default there (4 and 8 ranks on 2 cores: 1 MiB allreduces 1.2-1.4x slower on cubic, 4 MiB
// alltoalls of 512 KiB per peer 1.15-1.35x), and the loss-based algorithm for a larger one, which
// the window would hold back (4 MiB allreduces 1.4-1.8x faster than on the default, 16 MiB 1.4x).
#ifndef CHORUS_TRANSPORT_TCP_CONGESTION_H_
#define CHORUS_TRANSPORT_TCP_CONGESTION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace chorus::tcp {

// Links between ranks of one host that have a core each get a loss-based algorithm, those of a
// host whose ranks outnumber its cores switch by message size, links between hosts keep the
// system default.
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

// Whether a link's sockets switch by message size under `setting` (SizeSwitchedCongestion):
// under `auto`, on a link that joins two ranks of a host whose ranks outnumber its cores
// (TcpMesh::SameHostLinkOversubscribed).
bool SwitchesCongestionBySize(absl::string_view setting, bool same_host_oversubscribed);

// The congestion control of one socket of a same-host link on a host whose ranks outnumber its
// cores, under `auto` (TcpMesh::SameHostLinkOversubscribed): a message of at least
// kLossBasedFromBytes goes out under a loss-based algorithm (UseSameHostCongestionControl's for
// SameHostLink::kSharedCores: cubic, else reno),
// and the socket returns to the system default for smaller ones once everything it sent before
// is acknowledged, so that the rest of a large message never goes out under the default. Each
// return also starts the loss-based algorithm afresh for the next large message: on such a host
// a link's ranks often wait for a core, the kernel takes their late acknowledgements for
// reordering and loss (`ss -ti` shows reordering, DSACKs and a slow-start threshold), and a
// loss-based algorithm left running keeps the smaller window that taught it (cubic throughout
// measured 1.15-1.2x slower than switching at 4 and 16 MiB).
//
// Not thread-safe: its stream's (engine's mutex).
class SizeSwitchedCongestion {
 public:
  static constexpr uint64_t kLossBasedFromBytes = 1024 * 1024;

  // `fd` runs the system default now.
  explicit SizeSwitchedCongestion(int fd);

  // Before `bytes` of a message are queued on the socket; `queue_empty`: none of the stream's
  // earlier frames still waits to be written.
  void Before(uint64_t bytes, bool queue_empty);

 private:
  const int fd_;
  const std::string system_;  // the socket's algorithm as it was created
  bool loss_based_ = false;   // the socket runs the loss-based algorithm now
  // No more switching: the kernel refused one (refusing both loss-based algorithms, silently,
  // as ApplyCongestionControl's `auto` does; refusing the return, with a warning), or the
  // socket's default could not be read.
  bool stopped_;
};

}  // namespace chorus::tcp

#endif  // CHORUS_TRANSPORT_TCP_CONGESTION_H_
