// A rank's identity, read from the environment a launcher sets:
//
//   rank / size   CHORUS_RANK + CHORUS_SIZE (chorusrun), else RANK + WORLD_SIZE (torchrun),
//                 else SLURM_PROCID + SLURM_NTASKS (srun); the first pair with either variable
//                 set is used, and both of that pair must then be set and valid.
//   local rank    CHORUS_LOCAL_RANK, LOCAL_RANK or SLURM_LOCALID (same order); -1 when unset.
//   local size    CHORUS_LOCAL_SIZE or LOCAL_WORLD_SIZE (ranks on this host); -1 when unset.
// (The store comes from CHORUS_STORE, read by StoreUrlFromEnvironment in rendezvous/store_url.h.)
//
// Every error names the variable, the value and what would be accepted.
#ifndef CHORUS_RENDEZVOUS_RANK_ENV_H_
#define CHORUS_RENDEZVOUS_RANK_ENV_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace chorus {

struct RankIdentity {
  int rank = 0;
  int size = 0;
  int local_rank = -1;  // -1: the launcher did not say
  int local_size = -1;  // -1: the launcher did not say
  std::string source;   // the variables it came from, e.g. "CHORUS_RANK/CHORUS_SIZE"
};

// Reads the identity as described above. InvalidArgument when no launcher variables are set,
// when one of a pair is missing, or when rank is not in [0, size).
absl::StatusOr<RankIdentity> ReadRankIdentity();


}  // namespace chorus

#endif  // CHORUS_RENDEZVOUS_RANK_ENV_H_
