#include "chorus/transport/shm/shm_device.h"

#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chorus/core/env.h"
#include "chorus/core/host_identity.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/bootstrap.h"
#include "chorus/transport/shm/arena.h"
#include "chorus/transport/shm/engine.h"
#include "chorus/transport/shm/segment.h"

namespace chorus::shm {
namespace {

constexpr uint64_t kMinRingBytes = shm::kPageBytes;
constexpr uint64_t kMaxRingBytes = uint64_t{64} << 20;
constexpr uint64_t kStagingUnit = shm::kStagingChunks * shm::kPageBytes;

bool IsPowerOfTwo(uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

class ShmMesh final : public Mesh {
 public:
  explicit ShmMesh(std::shared_ptr<shm::Engine> engine) : engine_(std::move(engine)) {}
  ~ShmMesh() override { engine_->Shutdown(); }

  int rank() const override { return engine_->rank(); }
  int size() const override { return engine_->size(); }

  absl::StatusOr<Connection*> GetConnection(int peer) override {
    if (peer < 0 || peer >= size() || peer == rank()) {
      return InvalidArgumentError(absl::StrCat("shm: rank ", rank(), " asked for a connection to ",
                                               peer, "; peers are [0, ", size(),
                                               ") other than itself"));
    }
    return engine_->GetConnection(peer);
  }

  RequestPtr RecvFromAny(absl::Span<const int> peers, Tag tag, MemoryRef buffer) override {
    return engine_->RecvFromAny(peers, tag, buffer);
  }

  RequestPtr RecvFromAnyPart(absl::Span<const int> peers, Tag tag, MemoryRef buffer,
                             std::shared_ptr<ReceiveClaim> claim, int part) override {
    return engine_->RecvFromAny(peers, tag, buffer, std::move(claim), part);
  }

  void Abort(absl::string_view reason) override { engine_->Abort(reason); }
  // Shared memory connects ranks of one host only.
  std::vector<int> HostOfRanks() const override { return std::vector<int>(size(), 0); }
  SharedSlots* ClaimSharedSlots() override { return engine_->ClaimSharedSlots(); }

 private:
  const std::shared_ptr<shm::Engine> engine_;
};

// A stable 64-bit hash (FNV-1a): the same in every process, unlike absl::Hash.
uint64_t StableHash(uint64_t value) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (int i = 0; i < 8; ++i) {
    hash ^= (value >> (8 * i)) & 0xff;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

class ShmDevice final : public Device {
 public:
  explicit ShmDevice(const ShmOptions& options) : options_(options) {}

  absl::string_view kind() const override { return "shm"; }

  std::string address() const override {
    return absl::StrCat("shm1:", LocalHostIdentity(), ":", getpid());
  }

  DeviceLinks Links() const override { return {kShmLink, kShmLink}; }

  absl::StatusOr<std::unique_ptr<Mesh>> CreateMesh(Store& store, int rank, int size,
                                                   const MeshOptions& options,
                                                   Deadline deadline) override {
    if (size < 1 || rank < 0 || rank >= size) {
      return InvalidArgumentError(
          absl::StrCat("shm: cannot create a mesh with rank ", rank, " of size ", size));
    }
    CHORUS_ASSIGN_OR_RETURN(
        std::shared_ptr<shm::Inbox> inbox,
        shm::Inbox::Create(rank, size, {options_.ring_bytes, options_.staging_bytes}));
    const std::string my_address = inbox->address().ToString();
    auto exchanged = ExchangeAddresses(store, rank, size, my_address, deadline);
    if (!exchanged.ok()) {
      return Annotate(exchanged.status(),
                      absl::StrCat("shm: rank ", rank, " exchanging inbox addresses through ",
                                   store.Describe()));
    }
    shm::Engine::Config config;
    config.options = options_;
    config.rank = rank;
    config.size = size;
    config.job_hash = StableHash(exchanged->job_id);
    config.inbox = std::move(inbox);
    for (int r = 0; r < size; ++r) {
      auto address = shm::InboxAddress::Parse(exchanged->addresses[r]);
      if (!address.ok()) {
        return Annotate(address.status(), absl::StrCat("shm: the address of rank ", r));
      }
      config.addresses.push_back(*std::move(address));
    }
    CHORUS_LOG(kDebug, "shm") << "rank " << rank << " of " << size << ": inbox " << my_address
                              << ", job " << absl::StrCat(absl::Hex(exchanged->job_id));
    return std::unique_ptr<Mesh>(new ShmMesh(shm::Engine::Start(std::move(config))));
  }

 private:
  const ShmOptions options_;
};

}  // namespace

absl::StatusOr<ShmOptions> ShmOptions::FromEnv() {
  ShmOptions options;
  if (auto mode = GetEnv("CHORUS_SHM_SINGLE_COPY")) {
    CHORUS_ASSIGN_OR_RETURN(options.single_copy, shm::ParseSingleCopyMode(*mode));
  }
  CHORUS_ASSIGN_OR_RETURN(int64_t ring, GetEnvBytes("CHORUS_SHM_RING_BYTES",
                                                    static_cast<int64_t>(options.ring_bytes)));
  CHORUS_ASSIGN_OR_RETURN(int64_t eager, GetEnvBytes("CHORUS_SHM_EAGER_BYTES",
                                                     static_cast<int64_t>(options.eager_bytes)));
  CHORUS_ASSIGN_OR_RETURN(int64_t staging,
                          GetEnvBytes("CHORUS_SHM_STAGING_BYTES",
                                      static_cast<int64_t>(options.staging_bytes)));
  CHORUS_ASSIGN_OR_RETURN(options.spin, WaitSpinFromEnv("CHORUS_SHM_SPIN_US"));
  options.ring_bytes = static_cast<uint64_t>(ring);
  options.eager_bytes = static_cast<uint64_t>(eager);
  options.staging_bytes = static_cast<uint64_t>(staging);
  CHORUS_ASSIGN_OR_RETURN(int64_t hold_us,
                          GetEnvInt("CHORUS_SHM_HOLD_US", absl::ToInt64Microseconds(options.hold),
                                    0, 60 * 1000000));
  options.hold = absl::Microseconds(hold_us);
  CHORUS_RETURN_IF_ERROR(options.Validate());
  return options;
}

absl::Status ShmOptions::Validate() const {
  if (!IsPowerOfTwo(ring_bytes) || ring_bytes < kMinRingBytes || ring_bytes > kMaxRingBytes) {
    return InvalidArgumentError(absl::StrCat("shm: ring size ", ring_bytes,
                                             " (CHORUS_SHM_RING_BYTES) must be a power of two "
                                             "from 4k to 64M"));
  }
  if (staging_bytes == 0 || staging_bytes % kStagingUnit != 0 ||
      staging_bytes > (uint64_t{1} << 30)) {
    return InvalidArgumentError(absl::StrCat(
        "shm: staging size ", staging_bytes, " (CHORUS_SHM_STAGING_BYTES) must be a multiple of ",
        kStagingUnit / 1024, "k up to 1G"));
  }
  if (spin < absl::ZeroDuration() || hold < absl::ZeroDuration()) {
    return InvalidArgumentError(
        "shm: the spin and hold times (CHORUS_SHM_SPIN_US, CHORUS_SHM_HOLD_US) must not be "
        "negative");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Device>> CreateShmDevice(const ShmOptions& options) {
  CHORUS_RETURN_IF_ERROR(options.Validate());
  CHORUS_LOG(kInfo, "shm") << "shared-memory device: single copy "
                           << shm::SingleCopyModeName(options.single_copy) << ", ring "
                           << options.ring_bytes << " B, eager up to " << options.eager_bytes
                           << " B, staging " << options.staging_bytes << " B";
  return std::unique_ptr<Device>(new ShmDevice(options));
}

absl::StatusOr<std::unique_ptr<Device>> CreateShmDevice() {
  CHORUS_ASSIGN_OR_RETURN(ShmOptions options, ShmOptions::FromEnv());
  return CreateShmDevice(options);
}

absl::StatusOr<void*> AllocateSharedMemory(size_t bytes) {
  CHORUS_ASSIGN_OR_RETURN(shm::Arena * arena, shm::Arena::Get());
  return arena->Allocate(bytes);
}

absl::Status FreeSharedMemory(void* data) {
  if (data == nullptr) return absl::OkStatus();
  shm::Arena* arena = shm::Arena::IfCreated();
  if (arena == nullptr) {
    return InvalidArgumentError(
        "shm: FreeSharedMemory was given a buffer, but none was ever "
        "allocated with AllocateSharedMemory in this process");
  }
  return arena->Free(data);
}

}  // namespace chorus::shm
