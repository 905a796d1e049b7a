#include "chorus/core/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "chorus/core/status.h"

namespace chorus {

ScopedFd& ScopedFd::operator=(ScopedFd&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = other.Release();
  }
  return *this;
}

int ScopedFd::Release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void ScopedFd::Reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

std::string ErrnoText(int error) {
  char buffer[128];
  // GNU strerror_r returns the message, possibly not in `buffer`.
  return std::string(strerror_r(error, buffer, sizeof(buffer)));
}

absl::StatusOr<AddressFamily> ParseAddressFamily(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower.empty() || lower == "any") return AddressFamily::kAny;
  if (lower == "ipv4" || lower == "4" || lower == "inet") return AddressFamily::kIPv4;
  if (lower == "ipv6" || lower == "6" || lower == "inet6") return AddressFamily::kIPv6;
  return InvalidArgumentError(
      absl::StrCat("address family '", text, "' is not one of any, ipv4, ipv6"));
}

absl::StatusOr<SocketAddress> SocketAddress::FromIp(absl::string_view ip, uint16_t port) {
  SocketAddress result;
  const std::string text(ip);
  sockaddr_in v4{};
  sockaddr_in6 v6{};
  if (inet_pton(AF_INET, text.c_str(), &v4.sin_addr) == 1) {
    v4.sin_family = AF_INET;
    v4.sin_port = htons(port);
    std::memcpy(&result.storage_, &v4, sizeof(v4));
    result.length_ = sizeof(v4);
  } else if (inet_pton(AF_INET6, text.c_str(), &v6.sin6_addr) == 1) {
    v6.sin6_family = AF_INET6;
    v6.sin6_port = htons(port);
    std::memcpy(&result.storage_, &v6, sizeof(v6));
    result.length_ = sizeof(v6);
  } else {
    return InvalidArgumentError(
        absl::StrCat("'", ip, "' is not a numeric IPv4 or IPv6 address (e.g. 127.0.0.1, ::1)"));
  }
  return result;
}

absl::StatusOr<SocketAddress> SocketAddress::Parse(absl::string_view host_port) {
  absl::string_view host;
  absl::string_view port_text;
  if (absl::StartsWith(host_port, "[")) {
    const size_t close = host_port.find("]:");
    if (close == absl::string_view::npos) {
      return InvalidArgumentError(absl::StrCat("'", host_port, "' is not [ipv6]:port"));
    }
    host = host_port.substr(1, close - 1);
    port_text = host_port.substr(close + 2);
  } else {
    const size_t colon = host_port.find(':');
    if (colon == absl::string_view::npos || host_port.rfind(':') != colon) {
      return InvalidArgumentError(
          absl::StrCat("'", host_port, "' is not ipv4:port or [ipv6]:port"));
    }
    host = host_port.substr(0, colon);
    port_text = host_port.substr(colon + 1);
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port > 65535) {
    return InvalidArgumentError(absl::StrCat("'", host_port, "' has a bad port"));
  }
  return FromIp(host, static_cast<uint16_t>(port));
}

SocketAddress SocketAddress::FromSockaddr(const sockaddr* address, socklen_t length) {
  SocketAddress result;
  if (length > sizeof(result.storage_)) length = sizeof(result.storage_);
  std::memcpy(&result.storage_, address, length);
  result.length_ = length;
  return result;
}

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  if (family() == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  }
  return 0;
}

void SocketAddress::set_port(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage_)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage_)->sin6_port = htons(port);
}

bool SocketAddress::IsLoopback() const {
  if (family() == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr.s_addr) >> 24) == 127;
  }
  if (family() == AF_INET6) {
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr);
  }
  return false;
}

bool SocketAddress::IsLinkLocal() const {
  return family() == AF_INET6 &&
         IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr);
}

std::string SocketAddress::IpString() const {
  char text[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, text,
              sizeof(text));
  } else if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr, text,
              sizeof(text));
  }
  return text;
}

std::string SocketAddress::ToString() const {
  if (family() == AF_INET6) return absl::StrCat("[", IpString(), "]:", port());
  return absl::StrCat(IpString(), ":", port());
}

absl::StatusOr<std::vector<InterfaceAddress>> ListInterfaceAddresses() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return InternalError(absl::StrCat("getifaddrs failed: ", ErrnoText(errno)));
  }
  std::vector<InterfaceAddress> result;
  for (const ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || (entry->ifa_flags & IFF_UP) == 0) continue;
    const int family = entry->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    const socklen_t length = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    result.push_back({entry->ifa_name, SocketAddress::FromSockaddr(entry->ifa_addr, length)});
    result.back().address.set_port(0);
  }
  freeifaddrs(list);
  return result;
}

absl::StatusOr<InterfaceSpec> InterfaceSpec::Parse(absl::string_view text) {
  InterfaceSpec spec;
  text = absl::StripAsciiWhitespace(text);
  if (absl::ConsumePrefix(&text, "^")) spec.exclude = true;
  if (absl::ConsumePrefix(&text, "=")) spec.exact = true;
  for (absl::string_view name : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    spec.names.emplace_back(absl::StripAsciiWhitespace(name));
  }
  if (spec.names.empty() && !spec.exclude) {
    return InvalidArgumentError(absl::StrCat(
        "interface list '", text, "' names no interface (examples: eth0, =eth0, ^lo,docker)"));
  }
  return spec;
}

bool InterfaceSpec::Matches(absl::string_view interface) const {
  bool listed = false;
  for (const std::string& name : names) {
    if (exact ? interface == name : absl::StartsWith(interface, name)) {
      listed = true;
      break;
    }
  }
  return listed != exclude;
}

absl::StatusOr<InterfaceAddress> ChooseInterfaceAddress(
    absl::Span<const InterfaceAddress> candidates, const InterfaceSpec& spec, AddressFamily family,
    absl::string_view spec_text) {
  auto family_ok = [family](const SocketAddress& address) {
    if (address.IsLinkLocal()) return false;
    if (family == AddressFamily::kIPv4) return address.family() == AF_INET;
    if (family == AddressFamily::kIPv6) return address.family() == AF_INET6;
    return true;
  };
  // Interfaces in the kernel's order; on each, IPv4 before IPv6 when either will do.
  for (const InterfaceAddress& first : candidates) {
    if (!spec.Matches(first.interface)) continue;
    const InterfaceAddress* chosen = nullptr;
    for (const InterfaceAddress& candidate : candidates) {
      if (candidate.interface != first.interface || !family_ok(candidate.address)) continue;
      if (chosen == nullptr ||
          (chosen->address.family() == AF_INET6 && candidate.address.family() == AF_INET)) {
        chosen = &candidate;
      }
    }
    if (chosen != nullptr) return *chosen;
  }
  std::vector<std::string> seen;
  for (const InterfaceAddress& candidate : candidates) {
    seen.push_back(absl::StrCat(candidate.interface, " ", candidate.address.IpString()));
  }
  return InvalidArgumentError(absl::StrCat(
      "no usable address: interface list '", spec_text, "' with address family ",
      family == AddressFamily::kAny    ? "any"
      : family == AddressFamily::kIPv4 ? "ipv4"
                                       : "ipv6",
      " matches none of the interfaces that are up [", absl::StrJoin(seen, ", "),
      "] (IPv6 link-local addresses are skipped); set CHORUS_TCP_IFNAME or CHORUS_TCP_ADDR"));
}

absl::Status ConfigureStreamSocket(int fd, int buffer_bytes) {
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return InternalError(absl::StrCat("setsockopt(TCP_NODELAY) failed: ", ErrnoText(errno)));
  }
  if (buffer_bytes > 0) {
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof(buffer_bytes)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof(buffer_bytes)) != 0) {
      return InternalError(absl::StrCat("setsockopt(SO_SNDBUF/SO_RCVBUF, ", buffer_bytes,
                                        ") failed: ", ErrnoText(errno)));
    }
  }
  return absl::OkStatus();
}

absl::Status SetCongestionControl(int fd, absl::string_view algorithm) {
  const std::string name(algorithm);
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), name.size()) != 0) {
    const int error = errno;
    return InvalidArgumentError(absl::StrCat("the kernel refused TCP congestion control '", name,
                                             "': ", ErrnoText(error),
                                             error == ENOENT  ? " (not available)"
                                             : error == EPERM ? " (not allowed to this process)"
                                                              : ""));
  }
  return absl::OkStatus();
}

bool UseSameHostCongestionControl(int fd, SameHostLink link) {
  return (link == SameHostLink::kSharedCores && SetCongestionControl(fd, "cubic").ok()) ||
         SetCongestionControl(fd, "reno").ok();
}

std::string CongestionControlOf(int fd) {
  char name[32] = {};
  socklen_t length = sizeof(name) - 1;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &length) != 0) return "";
  return std::string(name);
}

bool SameHost(const SocketAddress& a, const SocketAddress& b) {
  return (a.IsLoopback() && b.IsLoopback()) || a.IpString() == b.IpString();
}

absl::StatusOr<SocketAddress> LocalAddressOf(int fd) {
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) {
    return InternalError(absl::StrCat("getsockname failed: ", ErrnoText(errno)));
  }
  return SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&local), length);
}

absl::StatusOr<ScopedFd> Listen(SocketAddress& address, int buffer_bytes) {
  ScopedFd fd(socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    return InternalError(
        absl::StrCat("socket() for ", address.ToString(), " failed: ", ErrnoText(errno)));
  }
  const int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (address.family() == AF_INET6) {
    setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  }
  // Accepted sockets inherit these options from the listener.
  CHORUS_RETURN_IF_ERROR(ConfigureStreamSocket(fd.get(), buffer_bytes));
  if (bind(fd.get(), address.sockaddr_ptr(), address.length()) != 0) {
    return InvalidArgumentError(
        absl::StrCat("cannot listen on ", address.ToString(), ": bind: ", ErrnoText(errno)));
  }
  if (listen(fd.get(), SOMAXCONN) != 0) {
    return InternalError(
        absl::StrCat("listen on ", address.ToString(), " failed: ", ErrnoText(errno)));
  }
  CHORUS_ASSIGN_OR_RETURN(address, LocalAddressOf(fd.get()));
  return fd;
}

absl::StatusOr<ScopedFd> StartConnect(const SocketAddress& address, int buffer_bytes) {
  ScopedFd fd(socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    return InternalError(absl::StrCat("socket() failed: ", ErrnoText(errno)));
  }
  CHORUS_RETURN_IF_ERROR(ConfigureStreamSocket(fd.get(), buffer_bytes));
  if (connect(fd.get(), address.sockaddr_ptr(), address.length()) != 0 && errno != EINPROGRESS) {
    return PeerUnavailableError(
        absl::StrCat("connect to ", address.ToString(), " failed: ", ErrnoText(errno)));
  }
  return fd;
}

int TakeSocketError(int fd) {
  int error = 0;
  socklen_t length = sizeof(error);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) return errno;
  return error;
}

std::string RemoteAddressString(int fd) {
  sockaddr_storage remote{};
  socklen_t length = sizeof(remote);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &length) != 0) {
    return "unknown peer";
  }
  return SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&remote), length).ToString();
}

}  // namespace chorus
