#include "chorus/transport/device_from_env.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "chorus/core/env.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"
#include "chorus/transport/hybrid/hybrid_device.h"
#include "chorus/transport/ibverbs/verbs_device.h"
#include "chorus/transport/shm/shm_device.h"
#include "chorus/transport/tcp/tcp_device.h"

namespace chorus {

absl::Status CheckTransportName(absl::string_view transport) {
  if (transport == "auto" || transport == "tcp" || transport == "shm" || transport == "ibverbs") {
    return absl::OkStatus();
  }
  return InvalidArgumentError(
      absl::StrCat("there is no transport '", transport, "'; choose from tcp, shm, ibverbs, auto"));
}

absl::StatusOr<std::unique_ptr<Device>> CreateDeviceByName(
    absl::string_view transport, const tcp::TcpDeviceOptions& tcp_options) {
  CHORUS_RETURN_IF_ERROR(CheckTransportName(transport));
  if (transport == "tcp") return tcp::CreateTcpDevice(tcp_options);
  if (transport == "shm") return shm::CreateShmDevice();
  if (transport == "ibverbs") return ibverbs::CreateVerbsDeviceFromEnv();
  std::unique_ptr<Device> network;
  std::string no_verbs;
  if (ibverbs::ActiveRdmaPortExists(&no_verbs)) {
    absl::StatusOr<std::unique_ptr<Device>> verbs = ibverbs::CreateVerbsDeviceFromEnv();
    if (verbs.ok()) {
      CHORUS_LOG(kInfo, "transport")
          << "auto: verbs (" << (*verbs)->address() << ") to ranks on other hosts";
      network = *std::move(verbs);
    } else if (GetErrorKind(verbs.status()) == ErrorKind::kInvalidArgument) {
      return verbs.status();  // a malformed CHORUS_IB_* value
    } else {
      CHORUS_LOG(kWarn, "transport")
          << "auto: an RDMA port is active but the verbs device "
          << "failed (" << verbs.status().message() << "); using tcp to ranks on other hosts";
    }
  } else {
    CHORUS_LOG(kInfo, "transport") << "auto: " << no_verbs << "; tcp to ranks on other hosts";
  }
  if (network == nullptr) {
    CHORUS_ASSIGN_OR_RETURN(network, tcp::CreateTcpDevice(tcp_options));
  }
  absl::StatusOr<std::unique_ptr<Device>> local = shm::CreateShmDevice();
  if (!local.ok()) {
    // A malformed CHORUS_SHM_* value is the user's to fix, never a silent fallback.
    if (GetErrorKind(local.status()) == ErrorKind::kInvalidArgument) return local.status();
    CHORUS_LOG(kWarn, "transport") << "auto: no shared-memory device (" << local.status().message()
                                   << "); using " << network->kind() << " to every peer";
    return network;
  }
  return CreateHybridDevice(*std::move(local), std::move(network));
}

std::string TransportFromEnvironment(absl::string_view fallback) {
  return GetEnv("CHORUS_TRANSPORT").value_or(std::string(fallback));
}

absl::StatusOr<std::unique_ptr<Device>> CreateDeviceFromEnv() {
  const std::string transport = TransportFromEnvironment("auto");
  const absl::Status name = CheckTransportName(transport);
  if (!name.ok()) return Annotate(name, "CHORUS_TRANSPORT");
  CHORUS_ASSIGN_OR_RETURN(tcp::TcpDeviceOptions tcp_options, tcp::TcpDeviceOptions::FromEnv());
  return CreateDeviceByName(transport, tcp_options);
}

}  // namespace chorus
