#include "chorus/rendezvous/rank_env.h"

#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "chorus/core/env.h"
#include "chorus/core/status.h"

namespace chorus {
namespace {

struct IdentityVariables {
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;  // nullptr: the launcher has no such variable
  const char* launcher;
};

// In order of preference: our own launcher first, so a chorusrun inside a Slurm allocation
// means what chorusrun says.
constexpr IdentityVariables kLaunchers[] = {
    {"CHORUS_RANK", "CHORUS_SIZE", "CHORUS_LOCAL_RANK", "CHORUS_LOCAL_SIZE", "chorusrun"},
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "torchrun"},
    // Slurm's per-node count (SLURM_TASKS_PER_NODE) is a list like "4(x2),3", not one number.
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr, "Slurm"},
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
    if (vars.local_size != nullptr) {
      CHORUS_ASSIGN_OR_RETURN(const int64_t local_size,
                              GetEnvInt(vars.local_size, -1, 1, kMaxRanks));
      identity.local_size = static_cast<int>(local_size);
    }
    identity.source = absl::StrCat(vars.rank, "/", vars.size);
    return identity;
  }
  return InvalidArgumentError(
      "no rank identity in the environment: set CHORUS_RANK and CHORUS_SIZE (or start the "
      "program with chorusrun -n <ranks>, torchrun, or srun)");
}

}  // namespace chorus
