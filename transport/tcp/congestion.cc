#include "chorus/transport/tcp/congestion.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/socket.h"
#include "chorus/core/status.h"

namespace chorus::tcp {
namespace {

// The kernel's limit on an algorithm's name, its terminating zero included (TCP_CA_NAME_MAX).
constexpr size_t kMaxNameBytes = 16;

}  // namespace

absl::Status ValidateCongestionSetting(absl::string_view setting) {
  bool well_formed = !setting.empty() && setting.size() < kMaxNameBytes;
  for (char c : setting) {
    well_formed = well_formed && (absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_');
  }
  if (well_formed) return absl::OkStatus();
  return InvalidArgumentError(absl::StrCat(
      "CHORUS_TCP_CONGESTION must be auto, system or a congestion control algorithm's name "
      "(lower-case, at most ",
      kMaxNameBytes - 1, " characters), not '", setting, "'"));
}

absl::Status ApplyCongestionControl(int fd, absl::string_view setting, bool same_host) {
  if (setting == kCongestionSystem) return absl::OkStatus();
  if (setting == kCongestionAuto) {
    // Refused by the kernel, the link keeps the default: slower for large messages, still right.
    if (same_host) UseSameHostCongestionControl(fd);
    return absl::OkStatus();
  }
  const absl::Status set = SetCongestionControl(fd, setting);
  if (set.ok()) return set;
  return InvalidArgumentError(absl::StrCat(
      "CHORUS_TCP_CONGESTION=", setting, ": ", set.message(),
      "; the algorithms this kernel has are in /proc/sys/net/ipv4/tcp_available_congestion_"
      "control, and those an unprivileged process may choose in "
      "net.ipv4.tcp_allowed_congestion_control"));
}

}  // namespace chorus::tcp
