#include "chorus/integrations/launcher/rank_env.h"

#include <limits>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "chorus/core/env.h"
#include "chorus/core/status.h"

namespace chorus {
namespace {

struct IdentityVariables {
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* launcher;
};

// In order of preference: our own launcher first, so a chorusrun inside a Slurm allocation
// means what chorusrun says.
constexpr IdentityVariables kLaunchers[] = {
    {"CHORUS_RANK", "CHORUS_SIZE", "CHORUS_LOCAL_RANK", "chorusrun"},
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun"},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "Slurm"},
};

constexpr int64_t kMaxRanks = std::numeric_limits<int>::max();

absl::Status MissingPartner(const IdentityVariables& vars, const char* missing) {
  return InvalidArgumentError(absl::StrCat(vars.rank, " and ", vars.size, " (set by ",
                                           vars.launcher, ") must be set together; ", missing,
                                           " is not set"));
}

}  // namespace

absl::StatusOr<RankIdentity> ReadRankIdentity() {
  for (const IdentityVariables& vars : kLaunchers) {
    const bool has_rank = GetEnv(vars.rank).has_value();
    const bool has_size = GetEnv(vars.size).has_value();
    if (!has_rank && !has_size) continue;
    if (!has_rank) return MissingPartner(vars, vars.rank);
    if (!has_size) return MissingPartner(vars, vars.size);
    CHORUS_ASSIGN_OR_RETURN(const int64_t size, GetEnvInt(vars.size, 0, 1, kMaxRanks));
    CHORUS_ASSIGN_OR_RETURN(const int64_t rank, GetEnvInt(vars.rank, 0, 0, kMaxRanks));
    if (rank >= size) {
      return InvalidArgumentError(absl::StrCat(vars.rank, "=", rank, " is not below ", vars.size,
                                               "=", size, "; ranks are numbered from 0"));
    }
    CHORUS_ASSIGN_OR_RETURN(const int64_t local_rank,
                            GetEnvInt(vars.local_rank, -1, 0, kMaxRanks));
    RankIdentity identity;
    identity.rank = static_cast<int>(rank);
    identity.size = static_cast<int>(size);
    identity.local_rank = static_cast<int>(local_rank);
    identity.source = absl::StrCat(vars.rank, "/", vars.size);
    return identity;
  }
  return InvalidArgumentError(
      "no rank identity in the environment: set CHORUS_RANK and CHORUS_SIZE (or start the "
      "program with chorusrun -n <ranks>, torchrun, or srun)");
}

absl::StatusOr<StoreAddress> ParseStoreUrl(absl::string_view url) {
  StoreAddress address;
  address.url = std::string(url);
  absl::string_view rest = url;
  const auto bad = [&](absl::string_view why) {
    return InvalidArgumentError(absl::StrCat(
        "store URL '", url, "' ", why,
        "; expected file:///absolute/dir or redis://host:port[/prefix]"));
  };
  if (absl::ConsumePrefix(&rest, "file://")) {
    if (!absl::StartsWith(rest, "/")) return bad("does not name an absolute directory");
    address.kind = StoreAddress::Kind::kFile;
    address.path = std::string(rest);
    return address;
  }
  if (!absl::ConsumePrefix(&rest, "redis://")) return bad("has an unknown scheme");
  address.kind = StoreAddress::Kind::kRedis;
  const size_t slash = rest.find('/');
  if (slash != absl::string_view::npos) {
    address.prefix = std::string(rest.substr(slash + 1));
    rest = rest.substr(0, slash);
  }
  // The port follows the last ':' after any bracketed IPv6 host.
  const size_t colon = rest.rfind(':');
  const size_t bracket = rest.rfind(']');
  if (colon == absl::string_view::npos || (bracket != absl::string_view::npos && colon < bracket)) {
    return bad("has no port");
  }
  absl::string_view host = rest.substr(0, colon);
  if (absl::ConsumePrefix(&host, "[") && !absl::ConsumeSuffix(&host, "]")) {
    return bad("has an unclosed '[' in its host");
  }
  if (host.empty()) return bad("has no host");
  int port = 0;
  if (!absl::SimpleAtoi(rest.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return bad("has a port that is not in [1, 65535]");
  }
  address.host = std::string(host);
  address.port = port;
  return address;
}

absl::StatusOr<StoreAddress> ReadStoreAddress() {
  const std::optional<std::string> url = GetEnv("CHORUS_STORE");
  if (!url) {
    return InvalidArgumentError(
        "CHORUS_STORE is not set: set it to file:///shared/dir or redis://host:port/prefix (or "
        "start the program with chorusrun, which sets it)");
  }
  auto address = ParseStoreUrl(*url);
  if (!address.ok()) return Annotate(address.status(), "CHORUS_STORE");
  return address;
}

}  // namespace chorus
