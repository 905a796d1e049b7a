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

const std::vector<TransportFactory>& ConformanceTransports();

// The hybrid transport (shared memory within a host, loopback TCP between hosts) with rank r
// told it is on host `host_of(r)` (HybridOptions::host_id), so one machine plays several.
TransportFactory HybridTransport(std::string name, std::function<int(int rank)> host_of);

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_TRANSPORT_TRANSPORT_FACTORY_H_
