#include "chorus/transport/ibverbs/verbs_options.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "chorus/core/env.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/rank_env.h"

namespace chorus::ibverbs {

absl::StatusOr<VerbsDeviceOptions> VerbsDeviceOptions::FromEnv() {
  VerbsDeviceOptions options;
  options.device = GetEnv("CHORUS_IB_DEVICE").value_or("");
  if (options.device.find(',') != std::string::npos) {
    const std::vector<std::string> devices =
        absl::StrSplit(options.device, ',', absl::SkipWhitespace());
    const absl::StatusOr<RankIdentity> identity = ReadRankIdentity();
    if (!identity.ok()) {
      return Annotate(identity.status(),
                      "CHORUS_IB_DEVICE lists several devices, and which is "
                      "this rank's depends on its local rank");
    }
    const int index = identity->local_rank >= 0 ? identity->local_rank : identity->rank;
    options.device = devices.empty() ? "" : devices[static_cast<size_t>(index) % devices.size()];
  }
  CHORUS_ASSIGN_OR_RETURN(options.port, GetEnvInt("CHORUS_IB_PORT", options.port, 0, 255));
  CHORUS_ASSIGN_OR_RETURN(options.gid_index,
                          GetEnvInt("CHORUS_IB_GID_INDEX", options.gid_index, -1, 65535));
  CHORUS_ASSIGN_OR_RETURN(options.mtu, GetEnvInt("CHORUS_IB_MTU", options.mtu, 0, 4096));
  CHORUS_ASSIGN_OR_RETURN(const int64_t slot_bytes,
                          GetEnvBytes("CHORUS_IB_EAGER_BYTES", options.slot_bytes));
  if (slot_bytes < 256 || slot_bytes > (int64_t{1} << 20)) {
    return InvalidArgumentError(
        absl::StrCat("CHORUS_IB_EAGER_BYTES must be from 256 to 1M, not ", slot_bytes));
  }
  options.slot_bytes = static_cast<size_t>(slot_bytes);
  CHORUS_ASSIGN_OR_RETURN(options.slots, GetEnvInt("CHORUS_IB_SLOTS", options.slots, 2, 4096));
  CHORUS_ASSIGN_OR_RETURN(const int64_t cache,
                          GetEnvBytes("CHORUS_IB_REG_CACHE_BYTES", options.reg_cache_bytes));
  options.reg_cache_bytes = static_cast<size_t>(cache);
  CHORUS_ASSIGN_OR_RETURN(options.ack_timeout,
                          GetEnvInt("CHORUS_IB_TIMEOUT", options.ack_timeout, 1, 31));
  CHORUS_ASSIGN_OR_RETURN(options.retry_count,
                          GetEnvInt("CHORUS_IB_RETRY_COUNT", options.retry_count, 0, 7));
  CHORUS_ASSIGN_OR_RETURN(options.spin, WaitSpinFromEnv("CHORUS_IB_SPIN_US"));
  return options;
}

}  // namespace chorus::ibverbs
