// Options of a TCP device, with the environment variables that set them.
#ifndef CHORUS_TRANSPORT_TCP_TCP_OPTIONS_H_
#define CHORUS_TRANSPORT_TCP_TCP_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chorus/core/security/link_security.h"
#include "chorus/core/socket.h"
#include "chorus/transport/request.h"

namespace chorus::tcp {

// Plain options; every field has the default shown. FromEnv() reads the variables listed
// beside each field (documented in docs/transport-tcp.md).
struct TcpDeviceOptions {
  // CHORUS_TCP_ADDR: a numeric IP to listen on ("127.0.0.1", "::1"). Takes precedence over
  // `interfaces`.
  std::string address;
  // CHORUS_TCP_IFNAME: interface list, "eth0" (prefix), "=eth0" (exact), "^lo,docker"
  // (exclude). Empty: the first interface that is not loopback or docker, else loopback.
  std::string interfaces;
  // CHORUS_TCP_FAMILY: any | ipv4 | ipv6 (which address of the chosen interface).
  AddressFamily family = AddressFamily::kAny;
  // CHORUS_TCP_PORT: the listening port; 0 lets the kernel choose.
  int port = 0;
  // CHORUS_TCP_STREAMS: sockets per peer; messages of at least `stripe_min_bytes` are split
  // across them. Set by the dialing side of each pair.
  int streams = 1;
  // CHORUS_TCP_STRIPE_MIN: the smallest message striped across streams.
  int64_t stripe_min_bytes = int64_t{1} << 20;
  // CHORUS_TCP_SOCKET_BUFFER: SO_SNDBUF and SO_RCVBUF per socket; 0 keeps kernel autotuning.
  int socket_buffer_bytes = 4 << 20;
  // CHORUS_TCP_CONGESTION: the TCP congestion control of each link (congestion.h): `auto`
  // (reno between ranks of one host that have a core each, chosen by size on a host whose ranks
  // outnumber its cores: congestion.h; the system default
  // otherwise), `system` (the system default everywhere) or an algorithm's name for every link.
  std::string congestion = "auto";
  // CHORUS_TCP_MAX_MESSAGE: the largest message sent or accepted; a header announcing more is
  // a protocol error, checked before anything is allocated.
  int64_t max_message_bytes = int64_t{4} << 30;
  // CHORUS_TCP_HANDSHAKE_TIMEOUT: how long an accepted socket may take to send its handshake,
  // and a dialer to get its reply.
  absl::Duration handshake_timeout = absl::Seconds(5);
  // CHORUS_TCP_SPIN_US (default: CHORUS_SPIN_US, else kDefaultWaitSpin): how long a waiting
  // thread polls the sockets (epoll_wait without sleeping, yielding the core every few polls)
  // before it blocks in epoll_wait. A wake-up from epoll_wait costs 20-40 us on virtual
  // machines, several times a loopback message; 0 blocks at once.
  absl::Duration spin = kDefaultWaitSpin;
  // CHORUS_AUTH_KEY / CHORUS_AUTH_KEY_FILE and CHORUS_TLS_CERT / _KEY / _CA: the job secret every
  // connection proves, and TLS (docs/security.md). Neither by default.
  security::LinkSecurity security;

  // Defaults overridden by the environment; InvalidArgument naming the variable on a bad value.
  static absl::StatusOr<TcpDeviceOptions> FromEnv();
};

}  // namespace chorus::tcp

#endif  // CHORUS_TRANSPORT_TCP_TCP_OPTIONS_H_
