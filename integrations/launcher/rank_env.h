// A rank's identity and rendezvous store, read from the environment a launcher sets:
//
//   rank / size   CHORUS_RANK + CHORUS_SIZE (chorusrun), else RANK + WORLD_SIZE (torchrun),
//                 else SLURM_PROCID + SLURM_NTASKS (srun); the first pair with either variable
//                 set is used, and both of that pair must then be set and valid.
//   local rank    CHORUS_LOCAL_RANK, LOCAL_RANK or SLURM_LOCALID (same order); -1 when unset.
//   store         CHORUS_STORE: file:///absolute/dir or redis://host:port[/prefix]
//
// Every error names the variable, the value and what would be accepted.
#ifndef CHORUS_INTEGRATIONS_LAUNCHER_RANK_ENV_H_
#define CHORUS_INTEGRATIONS_LAUNCHER_RANK_ENV_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace chorus {

struct RankIdentity {
  int rank = 0;
  int size = 0;
  int local_rank = -1;  // -1: the launcher did not say
  std::string source;   // the variables it came from, e.g. "CHORUS_RANK/CHORUS_SIZE"
};

// Reads the identity as described above. InvalidArgument when no launcher variables are set,
// when one of a pair is missing, or when rank is not in [0, size).
absl::StatusOr<RankIdentity> ReadRankIdentity();

// Where the ranks meet.
struct StoreAddress {
  enum class Kind { kFile, kRedis };
  Kind kind = Kind::kFile;
  std::string path;    // kFile: the shared directory
  std::string host;    // kRedis
  int port = 0;        // kRedis
  std::string prefix;  // kRedis: key prefix (may be empty)
  std::string url;     // as given
};

// Parses "file:///absolute/dir" or "redis://host:port[/prefix]" (host may be "[::1]").
absl::StatusOr<StoreAddress> ParseStoreUrl(absl::string_view url);

// Reads and parses CHORUS_STORE; InvalidArgument naming the variable when it is unset or bad.
absl::StatusOr<StoreAddress> ReadStoreAddress();

}  // namespace chorus

#endif  // CHORUS_INTEGRATIONS_LAUNCHER_RANK_ENV_H_
