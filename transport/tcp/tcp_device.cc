#include "chorus/transport/tcp/tcp_device.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/bootstrap.h"
#include "chorus/transport/tcp/acceptor.h"
#include "chorus/transport/tcp/congestion.h"
#include "chorus/transport/tcp/device_state.h"
#include "chorus/transport/tcp/handshake.h"
#include "chorus/transport/tcp/progress_engine.h"
#include "chorus/transport/tcp/tcp_mesh.h"

namespace chorus::tcp {
namespace {

// Used when CHORUS_TCP_IFNAME is unset: NCCL's and Gloo's default, then loopback.
constexpr absl::string_view kDefaultInterfaces = "^lo,docker";
constexpr absl::string_view kLoopbackInterfaces = "lo";
// Free unexpected-message buffers a device keeps for reuse (buffer_pool.h): enough for the
// segments a pipelined algorithm has in flight towards a few peers.
constexpr size_t kCachedUnexpectedBytes = 64 << 20;

// Thread-safe: the device's state is its context, guarded by the engine's mutex.
class TcpDevice : public Device {
 public:
  TcpDevice(std::shared_ptr<DeviceState> context, std::unique_ptr<Acceptor> acceptor)
      : context_(std::move(context)),
        address_(context_->listen_address.ToString()),
        acceptor_(std::move(acceptor)) {}

  ~TcpDevice() override {
    context_->engine->StopBackgroundThread();
    std::lock_guard<std::mutex> lock(context_->engine->mu());
    acceptor_.reset();
    if (!context_->meshes.empty()) {
      CHORUS_LOG(kWarn, "tcp") << "TCP device " << address_ << " destroyed while "
                               << context_->meshes.size()
                               << " mesh(es) still use it; their requests now progress only "
                                  "while waited on";
    }
  }

  absl::string_view kind() const override { return "tcp"; }
  std::string address() const override { return address_; }
  DeviceLinks Links() const override { return {kTcpLink, kTcpLink}; }

  absl::StatusOr<std::unique_ptr<Mesh>> CreateMesh(Store& store, int rank, int size,
                                                   const MeshOptions& options,
                                                   Deadline deadline) override {
    if (size < 1 || rank < 0 || rank >= size) {
      return InvalidArgumentError(
          absl::StrCat("CreateMesh: rank ", rank, " is not in a mesh of size ", size));
    }
    uint64_t mesh_id = RandomId();
    {
      std::lock_guard<std::mutex> lock(context_->engine->mu());
      while (context_->meshes.contains(mesh_id)) mesh_id = RandomId();
    }
    auto mesh = std::make_unique<TcpMesh>(context_, rank, size, options, mesh_id);
    CHORUS_ASSIGN_OR_RETURN(
        BootstrapResult bootstrap,
        ExchangeAddresses(store, rank, size, FormatPublishedAddress({address_, mesh_id}),
                          deadline));
    std::vector<PeerAddress> peers(size);
    for (int peer = 0; peer < size; ++peer) {
      absl::StatusOr<PublishedAddress> published = ParsePublishedAddress(bootstrap.addresses[peer]);
      absl::StatusOr<SocketAddress> address =
          published.ok() ? SocketAddress::Parse(published->socket_address) : published.status();
      if (!address.ok()) {
        return Annotate(address.status(),
                        absl::StrCat("rank ", peer, " published an address through ",
                                     store.Describe(), " that is not a published TCP address"));
      }
      peers[peer] = {*address, published->mesh_id};
    }
    {
      std::lock_guard<std::mutex> lock(context_->engine->mu());
      mesh->SetPeers(bootstrap.job_id, std::move(peers));
      if (acceptor_ != nullptr) acceptor_->MeshReady(mesh_id);
    }
    CHORUS_LOG(kDebug, "tcp") << "mesh " << absl::StrCat(absl::Hex(mesh_id)) << ": rank " << rank
                              << " of " << size << ", job "
                              << absl::StrCat(absl::Hex(bootstrap.job_id));
    return std::unique_ptr<Mesh>(std::move(mesh));
  }

 private:
  const std::shared_ptr<DeviceState> context_;
  const std::string address_;
  std::unique_ptr<Acceptor> acceptor_;  // guarded by the engine's mutex
};

}  // namespace

absl::StatusOr<SocketAddress> SelectListenAddress(const TcpDeviceOptions& options) {
  if (!options.address.empty()) {
    CHORUS_ASSIGN_OR_RETURN(SocketAddress address,
                            SocketAddress::FromIp(options.address, options.port));
    if ((options.family == AddressFamily::kIPv4 && address.family() != AF_INET) ||
        (options.family == AddressFamily::kIPv6 && address.family() != AF_INET6)) {
      return InvalidArgumentError(absl::StrCat("CHORUS_TCP_ADDR=", options.address,
                                               " is not of the family CHORUS_TCP_FAMILY asks"));
    }
    return address;
  }
  CHORUS_ASSIGN_OR_RETURN(std::vector<InterfaceAddress> candidates, ListInterfaceAddresses());
  absl::StatusOr<InterfaceAddress> chosen;
  if (!options.interfaces.empty()) {
    CHORUS_ASSIGN_OR_RETURN(InterfaceSpec spec, InterfaceSpec::Parse(options.interfaces));
    chosen = ChooseInterfaceAddress(candidates, spec, options.family, options.interfaces);
  } else {
    chosen = ChooseInterfaceAddress(candidates, *InterfaceSpec::Parse(kDefaultInterfaces),
                                    options.family, kDefaultInterfaces);
    if (!chosen.ok()) {
      CHORUS_LOG(kInfo, "tcp") << "no interface but loopback is up; using loopback";
      chosen = ChooseInterfaceAddress(candidates, *InterfaceSpec::Parse(kLoopbackInterfaces),
                                      options.family, kLoopbackInterfaces);
    }
  }
  if (!chosen.ok()) return chosen.status();
  CHORUS_LOG(kDebug, "tcp") << "interface " << chosen->interface << " chosen";
  SocketAddress address = chosen->address;
  address.set_port(static_cast<uint16_t>(options.port));
  return address;
}

absl::StatusOr<std::unique_ptr<Device>> CreateTcpDevice(const TcpDeviceOptions& options) {
  if (options.streams < 1 || options.streams > static_cast<int>(kMaxStreams)) {
    return InvalidArgumentError(absl::StrCat("TCP streams per peer must be in [1, ", kMaxStreams,
                                             "], not ", options.streams));
  }
  CHORUS_ASSIGN_OR_RETURN(SocketAddress address, SelectListenAddress(options));
  CHORUS_RETURN_IF_ERROR(ValidateCongestionSetting(options.congestion));
  CHORUS_ASSIGN_OR_RETURN(ScopedFd listener, Listen(address, options.socket_buffer_bytes));
  // A named algorithm the kernel refuses fails the device here rather than every link later.
  CHORUS_RETURN_IF_ERROR(
      ApplyCongestionControl(listener.get(), options.congestion, /*same_host=*/false));
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<ProgressEngine> engine,
                          ProgressEngine::Create(options.spin));
  auto context = std::make_shared<DeviceState>();
  context->engine = engine;
  context->options = options;
  context->listen_address = address;
  context->unexpected_buffers = BufferPool::Create(kCachedUnexpectedBytes);
  std::unique_ptr<Acceptor> acceptor;
  {
    std::lock_guard<std::mutex> lock(engine->mu());
    acceptor = std::make_unique<Acceptor>(context.get(), std::move(listener));
  }
  engine->StartBackgroundThread(ThreadLogRank());
  CHORUS_LOG(kInfo, "tcp") << "TCP device listening on " << address.ToString() << " ("
                           << options.streams << " stream(s) per peer, socket buffers "
                           << options.socket_buffer_bytes << " bytes, congestion control "
                           << options.congestion << ")";
  return std::unique_ptr<Device>(new TcpDevice(std::move(context), std::move(acceptor)));
}

absl::StatusOr<std::unique_ptr<Device>> CreateTcpDeviceFromEnv() {
  CHORUS_ASSIGN_OR_RETURN(TcpDeviceOptions options, TcpDeviceOptions::FromEnv());
  return CreateTcpDevice(options);
}

}  // namespace chorus::tcp
