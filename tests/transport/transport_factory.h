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
  // Creates one rank's device; called on the rank's own thread or in its own process.
  std::function<absl::StatusOr<std::unique_ptr<Device>>()> create_device;
};

const std::vector<TransportFactory>& ConformanceTransports();

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_TRANSPORT_TRANSPORT_FACTORY_H_
