#include "tests/transport/transport_factory.h"

#include "chorus/transport/shm/shm_device.h"
#include "chorus/transport/tcp/tcp_device.h"

namespace chorus::testing {
namespace {

// Loopback TCP; `streams` > 1 stripes every message of at least 64 KiB across the streams.
TransportFactory Tcp(std::string name, int streams) {
  return {std::move(name), [streams]() {
            tcp::TcpDeviceOptions options;
            options.address = "127.0.0.1";
            options.streams = streams;
            options.stripe_min_bytes = 64 * 1024;
            return tcp::CreateTcpDevice(options);
          }};
}

}  // namespace

const std::vector<TransportFactory>& ConformanceTransports() {
  static const auto* transports = new std::vector<TransportFactory>{
      Tcp("tcp", 1),
      Tcp("tcp-4-streams", 4),
      {"shm", [] { return CreateShmDevice(); }},
  };
  return *transports;
}

}  // namespace chorus::testing
