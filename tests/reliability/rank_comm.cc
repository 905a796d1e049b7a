#include "tests/reliability/rank_comm.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/file_store.h"

namespace chorus::testing {

absl::StatusOr<RankComm> JoinOverFileStore(const std::string& directory, const std::string& name,
                                           int rank, int size, const CommunicatorOptions& options,
                                           TransportKind transport) {
  RankComm joined;
  CHORUS_ASSIGN_OR_RETURN(joined.store, FileStore::Open(directory));
  CHORUS_ASSIGN_OR_RETURN(joined.device, MakeDevice(transport, rank));
  CHORUS_ASSIGN_OR_RETURN(
      joined.comm, Communicator::Create(*joined.store, name, *joined.device, rank, size, options));
  return joined;
}

bool ErrorNamesRank(const absl::Status& status, int rank) {
  return ErrorPeerRank(status) == rank &&
         absl::StrContains(status.message(), absl::StrCat("rank ", rank));
}

}  // namespace chorus::testing
