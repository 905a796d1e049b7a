#include "tests/transport/transport_factory.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "chorus/core/env.h"
#include "chorus/core/status.h"
#include "chorus/transport/hybrid/hybrid_device.h"
#include "chorus/transport/ibverbs/verbs_device.h"
#include "chorus/transport/shm/shm_device.h"
#include "chorus/transport/tcp/tcp_device.h"
#include "tests/security/test_certificates.h"

namespace chorus::testing {
namespace {

absl::StatusOr<std::unique_ptr<Device>> LoopbackTcpDevice(int streams, bool secure = false) {
  tcp::TcpDeviceOptions options;
  options.address = "127.0.0.1";
  options.streams = streams;
  options.stripe_min_bytes = 64 * 1024;
  if (secure) {
    options.security.auth = security::AuthKey{"conformance-suite-job-secret", "test"};
    CHORUS_ASSIGN_OR_RETURN(options.security.tls, security::TlsContext::Create(MemberTlsFiles()));
  }
  return tcp::CreateTcpDevice(options);
}

// Loopback TCP; `streams` > 1 stripes every message of at least 64 KiB across the streams.
// `secure`: every link under TLS and the job secret's challenge-response.
TransportFactory Tcp(std::string name, int streams, bool secure = false) {
  return {std::move(name), [streams, secure](int) { return LoopbackTcpDevice(streams, secure); }};
}

// The transports every machine has.
std::vector<TransportFactory> EveryTransport() {
  return {
      Tcp("tcp", 1),
      Tcp("tcp-4-streams", 4),
      Tcp("tcp-tls-2-streams", 2, /*secure=*/true),
      {"shm", [](int) { return shm::CreateShmDevice(); }},
      // Rank 0 on a host of its own, the others together: the two-rank cases cross hosts (TCP
      // through the hybrid mesh) and the three-rank RecvFromAny case takes from two peers on
      // one other host. hybrid_test.cc covers shared memory inside the hybrid mesh, the
      // mixed layouts and RecvFromAny over peers of both transports.
      HybridTransport("hybrid", [](int rank) { return rank == 0 ? 0 : 1; }),
  };
}

}  // namespace

TransportFactory HybridTransport(std::string name, std::function<int(int rank)> host_of) {
  return {std::move(name), [host_of](int rank) -> absl::StatusOr<std::unique_ptr<Device>> {
            CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> local, shm::CreateShmDevice());
            CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> network, LoopbackTcpDevice(1));
            HybridOptions options;
            options.host_id = absl::StrCat("test-host-", host_of(rank));
            return CreateHybridDevice(std::move(local), std::move(network), options);
          }};
}

std::vector<std::string> TestVerbsDevices() {
  const std::optional<std::string> devices = GetEnv("CHORUS_TEST_IB_DEVICES");
  if (!devices.has_value()) return {};
  return absl::StrSplit(*devices, ',', absl::SkipWhitespace());
}

TransportFactory VerbsTransport() {
  return {"ibverbs", [](int rank) -> absl::StatusOr<std::unique_ptr<Device>> {
            const std::vector<std::string> devices = TestVerbsDevices();
            CHORUS_ASSIGN_OR_RETURN(ibverbs::VerbsDeviceOptions options,
                                    ibverbs::VerbsDeviceOptions::FromEnv());
            if (!devices.empty()) options.device = devices[rank % devices.size()];
            return ibverbs::CreateVerbsDevice(options);
          }};
}

const std::vector<TransportFactory>& ConformanceTransports() {
  static const auto* transports = [] {
    auto* all = new std::vector<TransportFactory>(EveryTransport());
    if (!TestVerbsDevices().empty()) all->push_back(VerbsTransport());
    const std::optional<std::string> wanted = GetEnv("CHORUS_TEST_TRANSPORTS");
    if (wanted.has_value()) {
      const std::vector<std::string> names = absl::StrSplit(*wanted, ',', absl::SkipWhitespace());
      all->erase(std::remove_if(all->begin(), all->end(),
                                [&](const TransportFactory& transport) {
                                  return std::find(names.begin(), names.end(), transport.name) ==
                                         names.end();
                                }),
                 all->end());
    }
    return all;
  }();
  return *transports;
}

}  // namespace chorus::testing
