#include "chorus/transport/tcp/congestion.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/logging.h"
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
    if (same_host) UseSameHostCongestionControl(fd, SameHostLink::kCoreEach);
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

bool SwitchesCongestionBySize(absl::string_view setting, bool same_host_oversubscribed) {
  return setting == kCongestionAuto && same_host_oversubscribed;
}

SizeSwitchedCongestion::SizeSwitchedCongestion(int fd)
    : fd_(fd), system_(CongestionControlOf(fd)), stopped_(system_.empty()) {}

void SizeSwitchedCongestion::Before(uint64_t bytes, bool queue_empty) {
  if (stopped_) return;
  if (bytes >= kLossBasedFromBytes) {
    if (loss_based_) return;
    loss_based_ = UseSameHostCongestionControl(fd_, SameHostLink::kSharedCores);
    // As ApplyCongestionControl under `auto`: the default still works, only slower.
    stopped_ = !loss_based_;
    return;
  }
  if (!loss_based_ || !queue_empty) return;
  // Bytes the kernel holds unacknowledged: the tail of an earlier large message.
  int unacknowledged = 0;
  if (ioctl(fd_, SIOCOUTQ, &unacknowledged) != 0 || unacknowledged > 0) return;
  const absl::Status back = SetCongestionControl(fd_, system_);
  if (!back.ok()) {
    // The kernel let this process choose the default before; the link still works as it is.
    stopped_ = true;
    CHORUS_LOG(kWarn, "tcp") << "a link within this host stays on " << CongestionControlOf(fd_)
                             << " from now on: " << back.message();
    return;
  }
  loss_based_ = false;
}

}  // namespace chorus::tcp
