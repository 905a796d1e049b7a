// The shared-memory transport: ranks on one host exchange messages through memfd segments and
// cross-memory attach, never through the network stack. See docs/transport-shm.md.
//
//   auto device = chorus::CreateShmDevice();          // options from CHORUS_SHM_* variables
//   auto mesh = (*device)->CreateMesh(store, rank, size, {}, deadline);
//
// Every rank of a mesh must be on this host (same kernel boot and pid namespace) and run as the
// same user; a peer that is not gets a connection whose requests fail with kPeerUnavailable
// saying so.
#ifndef CHORUS_TRANSPORT_SHM_SHM_DEVICE_H_
#define CHORUS_TRANSPORT_SHM_SHM_DEVICE_H_

#include <algorithm>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chorus/transport/request.h"
#include "chorus/transport/shm/single_copy.h"
#include "chorus/transport/transport.h"

namespace chorus::shm {

struct ShmOptions {
  // How large messages move (CHORUS_SHM_SINGLE_COPY=auto|cma|staging).
  SingleCopyMode single_copy = SingleCopyMode::kAuto;
  // Bytes of each directed ring (CHORUS_SHM_RING_BYTES); a power of two, 4 KiB to 64 MiB.
  uint64_t ring_bytes = uint64_t{256} << 10;
  // Messages up to this size are copied through the ring; larger ones take the single-copy path
  // (CHORUS_SHM_EAGER_BYTES; capped at a quarter of the receiver's ring).
  uint64_t eager_bytes = uint64_t{32} << 10;
  // Bytes of each directed staging area, used only where cross-memory attach is unavailable
  // or slow (CopyRates in single_copy.h) or forced off (CHORUS_SHM_STAGING_BYTES; a multiple
  // of 32 KiB, cut into 8 chunks).
  uint64_t staging_bytes = uint64_t{4} << 20;
  // How long a waiting thread polls before it sleeps on the doorbell (CHORUS_SHM_SPIN_US;
  // default CHORUS_SPIN_US, else kDefaultWaitSpin).
  absl::Duration spin = kDefaultWaitSpin;
  // How long a large message whose receive is not posted yet stays a descriptor (so a receive
  // posted meanwhile gets the single copy) before the receiver copies it into a buffer of its
  // own, so the sender completes without a matching receive (CHORUS_SHM_HOLD_US), per started
  // MiB of the message (HoldFor). Scaled because the receive of a large message is typically
  // posted only once the receiver has finished with data of about the same size (a pipelined
  // reduction); pulling it earlier costs a second copy of every byte and a fresh buffer.
  absl::Duration hold = absl::Milliseconds(1);

  // The hold of a message of `length` bytes: `hold` per started MiB.
  absl::Duration HoldFor(uint64_t length) const {
    return hold * static_cast<int64_t>(std::max<uint64_t>(1, (length + kMiB - 1) / kMiB));
  }
  static constexpr uint64_t kMiB = uint64_t{1} << 20;

  // Defaults overridden by the CHORUS_SHM_* variables; kInvalidArgument naming a variable whose
  // value is unusable.
  static absl::StatusOr<ShmOptions> FromEnv();
  absl::Status Validate() const;
};

// Creates the shared-memory device. Cheap: segments are created per mesh.
absl::StatusOr<std::unique_ptr<Device>> CreateShmDevice(const ShmOptions& options);
// The same with ShmOptions::FromEnv().
absl::StatusOr<std::unique_ptr<Device>> CreateShmDevice();

// A shared-memory link as calibrated between two cores. Each segment costs a rendezvous while
// its bytes cost only CPU copies, so fewer, larger segments pay less per byte; reductions read
// straight out of the staging area (docs/benchmarks.md, "Why the defaults are what they are").
// A message costs well under a microsecond, so only 1 KiB is worth copying into another. The
// ranks copy every byte themselves.
inline constexpr LinkProfile kShmLink = {2.0,
                                         0.035,
                                         0.05,
                                         size_t{2} << 20,
                                         size_t{1} << 10,
                                         /*eager_sends=*/true,
                                         /*relay_segment_bytes=*/0,
                                         /*copies_on_rank_cores=*/true};

// Host memory that the shm transport's peers read where it lies (NCCL's and MPI's registered
// buffers): a large message sent from it skips the staging area, so the receiver copies or
// reduces it straight out of this memory, one copy instead of two. Page-aligned, any size;
// from one arena per process of CHORUS_SHM_ARENA_BYTES (16 GiB of address space by default,
// pages allocated as they are touched). Any buffer works with every transport; only the shm
// transport gains from these.
absl::StatusOr<void*> AllocateSharedMemory(size_t bytes);
// Returns a buffer AllocateSharedMemory gave out (null is a no-op); kInvalidArgument for any
// other pointer. The buffer must not be in use by a pending request.
absl::Status FreeSharedMemory(void* data);

}  // namespace chorus::shm

#endif  // CHORUS_TRANSPORT_SHM_SHM_DEVICE_H_
