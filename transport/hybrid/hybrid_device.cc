#include "chorus/transport/hybrid/hybrid_device.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/bootstrap.h"
#include "chorus/rendezvous/prefix_store.h"
#include "chorus/transport/hybrid/host_identity.h"
#include "chorus/transport/hybrid/hybrid_mesh.h"

namespace chorus {
namespace {

// Thread-safe: immutable after construction; the inner devices are thread-safe.
class HybridDevice final : public Device {
 public:
  HybridDevice(std::unique_ptr<Device> local, std::unique_ptr<Device> network, std::string host_id)
      : local_(std::move(local)), network_(std::move(network)), host_id_(std::move(host_id)) {}

  absl::string_view kind() const override { return "hybrid"; }

  std::string address() const override {
    return absl::StrCat("hybrid(host ", host_id_, "; ", local_->address(), "; ",
                        network_->address(), ")");
  }

  // Between hosts its network device's link, within a host its local device's.
  DeviceLinks Links() const override { return {network_->Links().remote, local_->Links().local}; }

  absl::StatusOr<std::unique_ptr<Mesh>> CreateMesh(Store& store, int rank, int size,
                                                   const MeshOptions& options,
                                                   Deadline deadline) override {
    if (size < 1 || rank < 0 || rank >= size) {
      return InvalidArgumentError(
          absl::StrCat("hybrid: cannot create a mesh with rank ", rank, " of size ", size));
    }
    // The host identities travel like transport addresses: one Set and O(size / batch) reads.
    PrefixStore host_store("host", store);
    auto hosts = ExchangeAddresses(host_store, rank, size, host_id_, deadline);
    if (!hosts.ok()) {
      return Annotate(hosts.status(),
                      absl::StrCat("hybrid: rank ", rank, " exchanging host identities through ",
                                   store.Describe()));
    }
    // Hosts are numbered in the order of their lowest rank; every rank reads the same
    // identities, so every rank numbers them alike and makes the same choice of inner meshes
    // below (their address exchanges then complete).
    std::vector<int> host_of(size);
    std::vector<int> ranks_per_host;
    absl::flat_hash_map<absl::string_view, int> host_numbers;
    for (int r = 0; r < size; ++r) {
      const auto [entry, added] =
          host_numbers.try_emplace(hosts->addresses[r], static_cast<int>(host_numbers.size()));
      if (added) ranks_per_host.push_back(0);
      host_of[r] = entry->second;
      ++ranks_per_host[entry->second];
    }
    // A side no rank pair needs is left out (a single-host job never opens a socket); with one
    // rank, the network side stands.
    const bool shared_host =
        std::any_of(ranks_per_host.begin(), ranks_per_host.end(), [](int n) { return n > 1; });
    const bool several_hosts = ranks_per_host.size() > 1;

    HybridMesh::Side local{nullptr, std::string(local_->kind())};
    HybridMesh::Side network{nullptr, std::string(network_->kind())};
    if (shared_host) {
      CHORUS_ASSIGN_OR_RETURN(local.mesh,
                              CreateSide(*local_, "local", store, rank, size, options, deadline));
    }
    if (several_hosts || !shared_host) {
      CHORUS_ASSIGN_OR_RETURN(
          network.mesh, CreateSide(*network_, "network", store, rank, size, options, deadline));
    }
    auto mesh = std::make_unique<HybridMesh>(rank, size, std::move(host_of), std::move(local),
                                             std::move(network));
    CHORUS_LOG(kInfo, "hybrid") << mesh->DescribeLayout() << " (host " << host_id_ << ", "
                                << ranks_per_host.size() << " hosts)";
    return std::unique_ptr<Mesh>(std::move(mesh));
  }

 private:
  // The inner mesh of `device` over all ranks, its keys under "<prefix>/" so the two inner
  // meshes' address exchanges do not collide.
  static absl::StatusOr<std::unique_ptr<Mesh>> CreateSide(Device& device, absl::string_view prefix,
                                                          Store& store, int rank, int size,
                                                          const MeshOptions& options,
                                                          Deadline deadline) {
    PrefixStore side_store(prefix, store);
    auto mesh = device.CreateMesh(side_store, rank, size, options, deadline);
    if (!mesh.ok()) {
      return Annotate(mesh.status(),
                      absl::StrCat("hybrid: creating the ", device.kind(), " mesh of rank ", rank));
    }
    return mesh;
  }

  const std::unique_ptr<Device> local_;
  const std::unique_ptr<Device> network_;
  const std::string host_id_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> CreateHybridDevice(std::unique_ptr<Device> local,
                                                           std::unique_ptr<Device> network,
                                                           const HybridOptions& options) {
  if (local == nullptr || network == nullptr) {
    return InvalidArgumentError("hybrid: needs both a local and a network device");
  }
  std::string host_id = ResolveHostIdentity(options.host_id);
  CHORUS_LOG(kInfo, "hybrid") << "hybrid device: " << local->kind() << " within host " << host_id
                              << ", " << network->kind() << " at " << network->address()
                              << " to other hosts";
  return std::unique_ptr<Device>(
      new HybridDevice(std::move(local), std::move(network), std::move(host_id)));
}

}  // namespace chorus
