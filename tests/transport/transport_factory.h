// The transports the conformance suite runs against. A transport joins the suite with one
// line in transport_factory.cc.
#ifndef CHORUS_TESTS_TRANSPORT_TRANSPORT_FACTORY_H_
#define CHORUS_TESTS_TRANSPORT_TRANSPORT_FACTORY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "chorus/transport/transport.h"

namespace chorus::testing {

struct TransportFactory {
  std::string name;
  // Creates rank `rank`'s device; called on the rank's own thread or in its own process.
  std::function<absl::StatusOr<std::unique_ptr<Device>>(int rank)> create_device;
};

// Every transport of the suite: TCP (plain, striped, secured), shm and hybrid, plus verbs when
// TestVerbsDevices() names devices. CHORUS_TEST_TRANSPORTS ("ibverbs", "tcp,shm") keeps only
// the transports it names (the Soft-RoCE guest runs verbs alone).
const std::vector<TransportFactory>& ConformanceTransports();

// The RDMA devices the verbs tests use, from CHORUS_TEST_IB_DEVICES ("rxe0,rxe1": rank r opens
// device r mod 2, so two ranks talk across the link); empty when unset, and the verbs tests
// then report themselves skipped.
std::vector<std::string> TestVerbsDevices();

// The verbs transport on TestVerbsDevices(), other options from the CHORUS_IB_* variables.
TransportFactory VerbsTransport();

// The hybrid transport (shared memory within a host, loopback TCP between hosts) with rank r
// told it is on host `host_of(r)` (HybridOptions::host_id), so one machine plays several.
TransportFactory HybridTransport(std::string name, std::function<int(int rank)> host_of);

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_TRANSPORT_TRANSPORT_FACTORY_H_
