// The stray connections of the flood test (flood_test.cc): what each one sends to a rank's
// listening port, and how the rank must answer it.
#ifndef CHORUS_TESTS_TRANSPORT_STRAY_CONNECTIONS_H_
#define CHORUS_TESTS_TRANSPORT_STRAY_CONNECTIONS_H_

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chorus/rendezvous/store.h"
#include "chorus/transport/tcp/handshake.h"
#include "chorus/core/socket.h"
#include "tests/transport/hostile_peer.h"

namespace chorus::testing {

// What the ranks of a communicator published, index = rank.
struct PublishedRanks {
  uint64_t job_id = 0;
  std::vector<SocketAddress> addresses;
  std::vector<uint64_t> mesh_ids;
};

// Reads what the `ranks` ranks of the TCP communicator `comm_name` published in `store`, the
// way a peer reads it, waiting up to 20 s for each.
absl::StatusOr<PublishedRanks> ReadPublishedRanks(Store& store, absl::string_view comm_name,
                                                  int ranks);

// One stray connection: what it sends, whether to stay and see the rank close it, and the
// verdict the rank must answer with (none: it closes without a word).
struct Stray {
  std::string kind;
  std::string bytes;
  bool wait_for_close = true;
  std::optional<tcp::HandshakeVerdict> verdict;
};

// A random stray for rank `target`: connect and close, silence, random bytes, part of a Hello,
// a frame header instead of a Hello, or a Hello wrong in exactly one field (never one the rank
// could accept).
Stray MakeStray(std::mt19937_64& random, const PublishedRanks& published, int target);

// Why a stray the flooder waited on was not refused as it must be; empty when it was.
std::string RefusalProblem(const Stray& stray, const AttackOutcome& outcome);

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_TRANSPORT_STRAY_CONNECTIONS_H_
