// Runs a test body on every rank of a fresh communicator: ranks as threads of this process
// (sharing an in-process store) or as forked processes (sharing a FileStore directory), over
// a chosen transport. Bounded in time; the first failing rank's status is returned.
#ifndef CHORUS_TESTS_COLLECTIVES_WORLD_H_
#define CHORUS_TESTS_COLLECTIVES_WORLD_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "chorus/collectives/communicator.h"
#include "chorus/collectives/options.h"
#include "chorus/transport/transport.h"

namespace chorus::testing {

// kHybrid: shared memory within a host and loopback TCP between hosts, with ranks 2h and 2h+1
// told they share host h (HybridOptions::host_id), so every collective crosses both.
// kIbverbs runs on the devices CHORUS_TEST_IB_DEVICES names (tests/transport/transport_factory.h).
enum class TransportKind { kInproc, kTcp, kShm, kHybrid, kIbverbs };

std::string TransportName(TransportKind kind);

// A device of `kind` for rank `rank` (a TCP device listens on loopback).
absl::StatusOr<std::unique_ptr<Device>> MakeDevice(TransportKind kind, int rank);

using CommBody = std::function<absl::Status(Communicator& comm)>;

// For checks inside a rank body: OK when `condition` holds, else an Internal error saying
// `what`, which the runners below return as that rank's failure.
absl::Status Expect(bool condition, const std::string& what);

// OK when `status` is an InvalidArgument whose message contains `words`, else an Internal error
// saying what came instead.
absl::Status ExpectInvalidArgument(const absl::Status& status, const std::string& words);

// Runs `body` on `ranks` threads, each with its own device and communicator. A rank still
// running at `timeout` aborts the test process (a hang is a failure).
absl::Status RunOnThreads(TransportKind kind, int ranks, const CommBody& body,
                          absl::Duration timeout, const CommunicatorOptions& options = {});

// As RunOnThreads, but returns every rank's status.
std::vector<absl::Status> RunOnThreadsAll(TransportKind kind, int ranks, const CommBody& body,
                                          absl::Duration timeout,
                                          const CommunicatorOptions& options = {});

// Runs `body` on `ranks` forked processes (fork before any thread exists). A rank still
// running at `timeout` is killed and reported.
absl::Status RunOnProcesses(TransportKind kind, int ranks, const CommBody& body,
                            absl::Duration timeout, const CommunicatorOptions& options = {});

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_COLLECTIVES_WORLD_H_
