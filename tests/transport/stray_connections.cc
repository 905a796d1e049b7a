#include "tests/transport/stray_connections.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/deadline.h"
#include "chorus/core/status.h"
#include "chorus/transport/tcp/wire_format.h"

namespace chorus::testing {
namespace {

constexpr size_t kJobIdDigits = 16;

std::string RandomBytes(std::mt19937_64& random, size_t count) {
  std::string bytes(count, '\0');
  for (char& byte : bytes) byte = static_cast<char>(random());
  return bytes;
}

}  // namespace

// Communicator::Create scopes its mesh's keys under "chorus/comm/<name>/g<k>/mesh/" (k = 1 for
// a name's first creation in a store: rendezvous/group_generation.h), and
// ExchangeAddresses (rendezvous/bootstrap.h) stores each rank's published address (handshake.h)
// under "addr/<rank>", rank 0's record prefixed with the job id in 16 hex digits.
absl::StatusOr<PublishedRanks> ReadPublishedRanks(Store& store, absl::string_view comm_name,
                                                  int ranks) {
  PublishedRanks published;
  for (int rank = 0; rank < ranks; ++rank) {
    CHORUS_ASSIGN_OR_RETURN(std::string record, store.Get(absl::StrCat("chorus/comm/", comm_name,
                                                                       "/g1/mesh/addr/", rank),
                                                          Deadline::After(absl::Seconds(20))));
    if (rank == 0) {
      if (record.size() < kJobIdDigits ||
          !absl::SimpleHexAtoi(record.substr(0, kJobIdDigits), &published.job_id)) {
        return InternalError(absl::StrCat("rank 0 published '", record, "', not a job id"));
      }
      record.erase(0, kJobIdDigits);
    }
    CHORUS_ASSIGN_OR_RETURN(tcp::PublishedAddress rank_address, tcp::ParsePublishedAddress(record));
    CHORUS_ASSIGN_OR_RETURN(SocketAddress address,
                            SocketAddress::Parse(rank_address.socket_address));
    published.addresses.push_back(address);
    published.mesh_ids.push_back(rank_address.mesh_id);
  }
  return published;
}

Stray MakeStray(std::mt19937_64& random, const PublishedRanks& published, int target) {
  const uint32_t ranks = static_cast<uint32_t>(published.addresses.size());
  // A Hello the target would accept from its next rank but for the field each case changes.
  tcp::Hello hello;
  hello.job_id = published.job_id;
  hello.target_mesh_id = published.mesh_ids[target];
  hello.source_rank = (target + 1) % ranks;
  hello.source_mesh_id = published.mesh_ids[hello.source_rank];
  hello.target_rank = target;
  hello.dial_id = random();
  const bool linger = random() % 2 == 0;
  switch (random() % 9) {
    case 0:
      return {"connect and close", "", false, std::nullopt};
    case 1:
      return {"silence", "", true, std::nullopt};
    case 2:
      return {"random bytes", RandomBytes(random, 1 + random() % 300), linger, std::nullopt};
    case 3:
      return {"part of a handshake",
              HelloBytes(hello).substr(0, 1 + random() % (tcp::kHelloSize - 1)), linger,
              std::nullopt};
    case 4: {
      tcp::FrameHeader header;
      header.total_length = header.length = uint64_t{1} << 30;
      const tcp::EncodedFrameHeader frame = tcp::EncodeFrameHeader(header);
      return {"frame header instead of a handshake", std::string(frame.begin(), frame.end()), true,
              std::nullopt};
    }
    case 5: {
      hello.job_id ^= 1 + random() % 0xffff;
      // Data after a refused handshake must never be read as frames.
      return {"wrong job, then data", HelloBytes(hello) + RandomBytes(random, 200), true,
              tcp::HandshakeVerdict::kWrongJob};
    }
    case 6:
      hello.source_rank = ranks + random() % 100;
      return {"source rank out of range", HelloBytes(hello), true,
              tcp::HandshakeVerdict::kBadSourceRank};
    case 7:
      hello.target_rank = (target + 2) % ranks;
      return {"wrong target rank", HelloBytes(hello), true,
              tcp::HandshakeVerdict::kWrongTargetRank};
    default:
      // A second stream of a dial that never happened (the dial id is fresh).
      hello.stream_index = 1;
      hello.stream_count = 2;
      return {"stream of an unknown dial", HelloBytes(hello), true,
              tcp::HandshakeVerdict::kBadStream};
  }
}

std::string RefusalProblem(const Stray& stray, const AttackOutcome& outcome) {
  if (!outcome.sent) return "could not connect and send";
  if (!outcome.closed) return "not closed by the rank";
  if (!stray.verdict) {
    return outcome.reply.empty() ? "" : absl::StrCat(outcome.reply.size(), " bytes of reply");
  }
  const std::optional<tcp::HandshakeVerdict> verdict = VerdictOf(outcome);
  if (verdict == stray.verdict) return "";
  return absl::StrCat("answered ", verdict ? tcp::VerdictName(*verdict) : "no verdict",
                      " instead of ", tcp::VerdictName(*stray.verdict));
}

}  // namespace chorus::testing
