#include "chorus/transport/device_from_env.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "chorus/core/env.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"
#include "chorus/transport/hybrid/hybrid_device.h"
#include "chorus/transport/shm/shm_device.h"
#include "chorus/transport/tcp/tcp_device.h"

namespace chorus {

absl::Status CheckTransportName(absl::string_view transport) {
  if (transport == "auto" || transport == "tcp" || transport == "shm") return absl::OkStatus();
  return InvalidArgumentError(
      absl::StrCat("there is no transport '", transport, "'; choose from tcp, shm, auto"));
}

absl::StatusOr<std::unique_ptr<Device>> CreateDeviceByName(
    absl::string_view transport, const tcp::TcpDeviceOptions& tcp_options) {
  CHORUS_RETURN_IF_ERROR(CheckTransportName(transport));
  if (transport == "tcp") return tcp::CreateTcpDevice(tcp_options);
  if (transport == "shm") return shm::CreateShmDevice();
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> network, tcp::CreateTcpDevice(tcp_options));
  absl::StatusOr<std::unique_ptr<Device>> local = shm::CreateShmDevice();
  if (!local.ok()) {
    // A malformed CHORUS_SHM_* value is the user's to fix, never a silent fallback.
    if (GetErrorKind(local.status()) == ErrorKind::kInvalidArgument) return local.status();
    CHORUS_LOG(kWarn, "transport") << "auto: no shared-memory device (" << local.status().message()
                                   << "); using tcp to every peer";
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
