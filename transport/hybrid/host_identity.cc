#include "chorus/transport/hybrid/host_identity.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "chorus/core/env.h"
#include "chorus/core/host_identity.h"

namespace chorus {

const std::string& DetectedHostIdentity() {
  static const std::string* identity = [] {
    const std::string net = NamespaceInode("net");
    return new std::string(
        absl::StrCat(LocalHostIdentity(), "/", net.empty() ? "nonet" : net));
  }();
  return *identity;
}

std::string ResolveHostIdentity(absl::string_view override_id) {
  if (!override_id.empty()) return std::string(override_id);
  if (std::optional<std::string> env = GetEnv("CHORUS_HOSTID")) return *env;
  return DetectedHostIdentity();
}

}  // namespace chorus
