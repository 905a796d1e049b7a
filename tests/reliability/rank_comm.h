// What one forked rank of a fault test owns: a FileStore on the shared directory, a device (TCP
// on loopback unless the test names another transport) and a communicator over them.
#ifndef CHORUS_TESTS_RELIABILITY_RANK_COMM_H_
#define CHORUS_TESTS_RELIABILITY_RANK_COMM_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "chorus/collectives/communicator.h"
#include "chorus/rendezvous/store.h"
#include "chorus/transport/transport.h"
#include "tests/collectives/world.h"

namespace chorus::testing {

// Members in construction order: the communicator is destroyed before what it uses.
struct RankComm {
  std::unique_ptr<Store> store;
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> comm;
};

absl::StatusOr<RankComm> JoinOverFileStore(const std::string& directory, const std::string& name,
                                           int rank, int size, const CommunicatorOptions& options,
                                           TransportKind transport = TransportKind::kTcp);

// Whether `status` names `rank` as the peer at fault, both as its ErrorPeerRank (for programs) and
// in its message (for people).
bool ErrorNamesRank(const absl::Status& status, int rank);

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_RELIABILITY_RANK_COMM_H_
