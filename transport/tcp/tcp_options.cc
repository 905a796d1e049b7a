#include "chorus/transport/tcp/tcp_options.h"

#include "chorus/core/env.h"
#include "chorus/core/status.h"
#include "chorus/transport/request.h"
#include "chorus/transport/tcp/congestion.h"

namespace chorus::tcp {

absl::StatusOr<TcpDeviceOptions> TcpDeviceOptions::FromEnv() {
  TcpDeviceOptions options;
  options.address = GetEnv("CHORUS_TCP_ADDR").value_or("");
  options.interfaces = GetEnv("CHORUS_TCP_IFNAME").value_or("");
  if (const auto family = GetEnv("CHORUS_TCP_FAMILY")) {
    auto parsed = ParseAddressFamily(*family);
    if (!parsed.ok()) return Annotate(parsed.status(), "CHORUS_TCP_FAMILY");
    options.family = *parsed;
  }
  CHORUS_ASSIGN_OR_RETURN(options.port, GetEnvInt("CHORUS_TCP_PORT", options.port, 0, 65535));
  CHORUS_ASSIGN_OR_RETURN(options.streams, GetEnvInt("CHORUS_TCP_STREAMS", options.streams, 1, 64));
  CHORUS_ASSIGN_OR_RETURN(options.stripe_min_bytes,
                          GetEnvBytes("CHORUS_TCP_STRIPE_MIN", options.stripe_min_bytes));
  CHORUS_ASSIGN_OR_RETURN(const int64_t buffer,
                          GetEnvBytes("CHORUS_TCP_SOCKET_BUFFER", options.socket_buffer_bytes));
  if (buffer > (int64_t{1} << 30)) {
    return InvalidArgumentError("CHORUS_TCP_SOCKET_BUFFER must be at most 1G");
  }
  options.socket_buffer_bytes = static_cast<int>(buffer);
  options.congestion = GetEnv("CHORUS_TCP_CONGESTION").value_or(options.congestion);
  CHORUS_RETURN_IF_ERROR(ValidateCongestionSetting(options.congestion));
  CHORUS_ASSIGN_OR_RETURN(options.max_message_bytes,
                          GetEnvBytes("CHORUS_TCP_MAX_MESSAGE", options.max_message_bytes));
  CHORUS_ASSIGN_OR_RETURN(options.handshake_timeout, GetEnvDuration("CHORUS_TCP_HANDSHAKE_TIMEOUT",
                                                                    options.handshake_timeout));
  CHORUS_ASSIGN_OR_RETURN(options.spin, WaitSpinFromEnv("CHORUS_TCP_SPIN_US"));
  CHORUS_ASSIGN_OR_RETURN(options.security, security::LinkSecurity::FromEnv());
  return options;
}

}  // namespace chorus::tcp
