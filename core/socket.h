// Sockets for the TCP transport and the TCP store: an owning file descriptor, socket addresses
// (IPv4 and IPv6, parsed and printed as "1.2.3.4:5" / "[::1]:5"), the choice of the listen address
// from an interface list or an explicit address, and the socket options every stream uses.
#ifndef CHORUS_CORE_SOCKET_H_
#define CHORUS_CORE_SOCKET_H_

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace chorus {

// Owns one file descriptor and closes it on destruction. Move-only; thread-compatible.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() { Reset(); }
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.Release()) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept;
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release();
  void Reset();

 private:
  int fd_ = -1;
};

enum class AddressFamily { kAny, kIPv4, kIPv6 };

// "any", "ipv4"/"4"/"inet", "ipv6"/"6"/"inet6" (case-insensitive).
absl::StatusOr<AddressFamily> ParseAddressFamily(absl::string_view text);

// An IPv4 or IPv6 socket address. Value type; thread-compatible.
class SocketAddress {
 public:
  SocketAddress() = default;

  // A numeric IP literal ("127.0.0.1", "::1", "fd00::2"; no DNS) with `port`.
  static absl::StatusOr<SocketAddress> FromIp(absl::string_view ip, uint16_t port);
  // "1.2.3.4:80" or "[::1]:80", as ToString() prints them.
  static absl::StatusOr<SocketAddress> Parse(absl::string_view host_port);
  static SocketAddress FromSockaddr(const sockaddr* address, socklen_t length);

  int family() const { return storage_.ss_family; }
  uint16_t port() const;
  void set_port(uint16_t port);
  bool IsLoopback() const;
  // IPv6 link-local (fe80::/10): needs a scope id, so never published.
  bool IsLinkLocal() const;
  // "1.2.3.4:80", "[::1]:80".
  std::string ToString() const;
  // Without the port: "1.2.3.4", "::1".
  std::string IpString() const;

  const sockaddr* sockaddr_ptr() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t length() const { return length_; }

 private:
  sockaddr_storage storage_{};
  socklen_t length_ = 0;
};

// One address of one network interface that is up.
struct InterfaceAddress {
  std::string interface;
  SocketAddress address;  // port 0
};

// Every IPv4/IPv6 address of every interface that is up, in the kernel's order.
absl::StatusOr<std::vector<InterfaceAddress>> ListInterfaceAddresses();

// An interface list as NCCL and Gloo users type it: "eth0,ib" (names starting with any of
// these), "=eth0" (exactly these), "^lo,docker" (all but those starting with these),
// "^=lo" (all but exactly these).
struct InterfaceSpec {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;

  static absl::StatusOr<InterfaceSpec> Parse(absl::string_view text);
  bool Matches(absl::string_view interface) const;
};

// Picks the listen address among `candidates` (pure, for tests): the first interface that
// `spec` matches, an address of `family` on it (IPv4 first when kAny), skipping IPv6
// link-local addresses. NotFound-style InvalidArgument listing every candidate when nothing
// matches, so the user sees what there was to choose from.
absl::StatusOr<InterfaceAddress> ChooseInterfaceAddress(
    absl::Span<const InterfaceAddress> candidates, const InterfaceSpec& spec, AddressFamily family,
    absl::string_view spec_text);

// TCP_NODELAY, and SO_SNDBUF/SO_RCVBUF of `buffer_bytes` when > 0 (0 keeps the kernel's
// autotuning). Applied before connect/listen so the window scale covers the buffer.
absl::Status ConfigureStreamSocket(int fd, int buffer_bytes);

// Sets the TCP congestion control of `fd` (TCP_CONGESTION) to `algorithm`; the kernel's
// refusal otherwise (not built: ENOENT; not allowed to this process: EPERM).
absl::Status SetCongestionControl(int fd, absl::string_view algorithm);

// The two kinds of TCP link between ranks of one host, which want different congestion
// controls (UseSameHostCongestionControl).
enum class SameHostLink {
  kCoreEach,     // the host's ranks have a core each
  kSharedCores,  // the host's ranks outnumber its cores
};

// Gives a socket whose ends are on one host a loss-based congestion control. Delay-based ones
// such as BBR size their window from a round trip that over loopback is microseconds, a
// fraction of a large message. Loopback still reorders a stream whose segments are sent from
// both cores (a sender's own and its peer's, whose acknowledgement sends what the window let
// through), and the kernel takes that for loss and shrinks the window. Reno regains its window
// one segment per round trip, which over loopback is microseconds; cubic regains it on a clock
// of seconds, so while each rank has a core (kCoreEach) Reno is the one: 2-rank allreduces,
// allgathers and alltoalls from 16 MiB measured up to 1.7x faster than on cubic. While ranks
// share cores (kSharedCores) a round trip includes waiting for a core, and cubic measured as
// fast or faster (8 ranks on 2 cores, 64 MiB allreduce 1.1x), so it keeps cubic, else Reno.
// Every kernel builds Reno in and lets any process choose it. False when the kernel refused,
// and the socket keeps its default.
bool UseSameHostCongestionControl(int fd, SameHostLink link);

// The name of the congestion control `fd` uses; empty if the kernel does not say.
std::string CongestionControlOf(int fd);

// True when `a` and `b` are addresses of one host as a socket sees them: both loopback, or
// the same IP (a host reaches its own interface addresses over loopback).
bool SameHost(const SocketAddress& a, const SocketAddress& b);

// The local address of a bound or connected socket.
absl::StatusOr<SocketAddress> LocalAddressOf(int fd);

// A non-blocking, close-on-exec TCP socket bound to `address` (port 0: any) and listening.
// `address` is updated with the port the kernel chose.
absl::StatusOr<ScopedFd> Listen(SocketAddress& address, int buffer_bytes);

// A non-blocking, close-on-exec TCP socket with a connect to `address` under way (or done).
// Errors of connect() other than EINPROGRESS are returned.
absl::StatusOr<ScopedFd> StartConnect(const SocketAddress& address, int buffer_bytes);

// The pending error of a socket (SO_ERROR), 0 if none.
int TakeSocketError(int fd);

// "1.2.3.4:5" of the remote end, or "unknown peer" if the socket has none.
std::string RemoteAddressString(int fd);

// "<what> failed: <strerror(error)>" as an absl::Status message fragment.
std::string ErrnoText(int error);

}  // namespace chorus

#endif  // CHORUS_CORE_SOCKET_H_
