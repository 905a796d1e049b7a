#include "chorus/transport/ibverbs/verbs_device.h"

#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/bootstrap.h"
#include "chorus/rendezvous/prefix_store.h"
#include "chorus/transport/ibverbs/verbs_context.h"
#include "chorus/transport/ibverbs/verbs_engine.h"
#include "chorus/transport/ibverbs/verbs_library.h"
#include "chorus/transport/ibverbs/verbs_mesh.h"
#include "chorus/transport/ibverbs/wire.h"

namespace chorus::ibverbs {
namespace {

uint64_t RandomId() {
  std::random_device random;
  return (uint64_t{random()} << 32) | random();
}

class VerbsDevice : public Device {
 public:
  explicit VerbsDevice(std::shared_ptr<VerbsEngine> engine) : engine_(std::move(engine)) {}

  absl::string_view kind() const override { return "ibverbs"; }
  std::string address() const override { return engine_->context().Describe(); }
  DeviceLinks Links() const override { return {kVerbsLink, kVerbsLink}; }

  absl::StatusOr<std::unique_ptr<Mesh>> CreateMesh(Store& store, int rank, int size,
                                                   const MeshOptions& options,
                                                   Deadline deadline) override {
    if (size < 1 || rank < 0 || rank >= size) {
      return InvalidArgumentError(absl::StrCat("bad rank ", rank, " of ", size));
    }
    auto mesh = std::make_unique<VerbsMesh>(engine_, rank, size, RandomId());
    CHORUS_ASSIGN_OR_RETURN(PublishedAddress own, mesh->Prepare());
    CHORUS_ASSIGN_OR_RETURN(
        BootstrapResult bootstrap,
        ExchangeAddresses(store, rank, size, FormatPublishedAddress(own), deadline));
    std::vector<PublishedAddress> peers(size);
    for (int peer = 0; peer < size; ++peer) {
      absl::StatusOr<PublishedAddress> parsed = ParsePublishedAddress(bootstrap.addresses[peer]);
      if (!parsed.ok()) {
        return Annotate(
            parsed.status(),
            absl::StrCat("rank ", peer, " published an address through ", store.Describe(),
                         " that is not a verbs address (do all ranks use "
                         "CHORUS_TRANSPORT=ibverbs?)"));
      }
      peers[peer] = *std::move(parsed);
    }
    CHORUS_RETURN_IF_ERROR(mesh->Connect(peers));
    // A second round: every rank's queue pairs are ready to receive before anyone sends.
    PrefixStore ready("verbs-ready/", store);
    CHORUS_RETURN_IF_ERROR(ExchangeAddresses(ready, rank, size, "ready", deadline).status());
    CHORUS_RETURN_IF_ERROR(mesh->Start());
    CHORUS_LOG(kDebug, "ibverbs") << "mesh " << absl::StrCat(absl::Hex(mesh->mesh_id()))
                                  << ": rank " << rank << " of " << size << " on "
                                  << engine_->context().Describe();
    return std::unique_ptr<Mesh>(std::move(mesh));
  }

 private:
  const std::shared_ptr<VerbsEngine> engine_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> CreateVerbsDevice(const VerbsDeviceOptions& options) {
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<VerbsContext> context, VerbsContext::Open(options));
  const std::string described = context->Describe();
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<VerbsEngine> engine,
                          VerbsEngine::Create(std::move(context), options));
  CHORUS_LOG(kInfo, "ibverbs") << "verbs device " << described << ", " << options.slots
                               << " eager slots of " << options.slot_bytes << " bytes per peer";
  return std::unique_ptr<Device>(new VerbsDevice(std::move(engine)));
}

absl::StatusOr<std::unique_ptr<Device>> CreateVerbsDeviceFromEnv() {
  CHORUS_ASSIGN_OR_RETURN(VerbsDeviceOptions options, VerbsDeviceOptions::FromEnv());
  return CreateVerbsDevice(options);
}

bool ActiveRdmaPortExists(std::string* why_not) {
  absl::StatusOr<const VerbsLibrary*> verbs = LoadVerbsLibrary();
  if (!verbs.ok()) {
    if (why_not != nullptr) *why_not = std::string(verbs.status().message());
    return false;
  }
  if (why_not != nullptr) *why_not = "no active RDMA port";
  int count = 0;
  ibv_device** list = (*verbs)->get_device_list(&count);
  if (list == nullptr) return false;
  bool found = false;
  for (int i = 0; i < count && !found; ++i) {
    ibv_context* context = (*verbs)->open_device(list[i]);
    if (context == nullptr) continue;
    ibv_device_attr attr{};
    found = (*verbs)->query_device(context, &attr) == 0 && FirstActivePort(context, attr) != 0;
    (*verbs)->close_device(context);
  }
  (*verbs)->free_device_list(list);
  return found;
}

}  // namespace chorus::ibverbs
