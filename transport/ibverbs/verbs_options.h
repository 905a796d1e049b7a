// What a verbs device is opened with; FromEnv reads the CHORUS_IB_* variables (listed in
// docs/configuration.md and docs/transport-ibverbs.md).
#ifndef CHORUS_TRANSPORT_IBVERBS_VERBS_OPTIONS_H_
#define CHORUS_TRANSPORT_IBVERBS_VERBS_OPTIONS_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chorus/transport/request.h"

namespace chorus::ibverbs {

struct VerbsDeviceOptions {
  // CHORUS_IB_DEVICE: the RDMA device ("mlx5_0", "rxe0"); empty picks the first device with an
  // active port. A comma-separated list ("mlx5_0,mlx5_1") gives ranks of one host their
  // adapters in turn: entry local_rank mod length (the local rank from the launcher's
  // variables, else the rank).
  std::string device;
  // CHORUS_IB_PORT: the port number; 0 picks the device's first active port.
  int port = 0;
  // CHORUS_IB_GID_INDEX: the GID table entry; -1 picks the RoCE v2 entry with an IPv4-mapped
  // address on an Ethernet link layer (what routes over IP), entry 0 on InfiniBand.
  int gid_index = -1;
  // CHORUS_IB_MTU: the path MTU in bytes (256 .. 4096); 0 takes the port's active MTU. Larger
  // than the active MTU is refused: such a queue pair drops every packet without an error.
  int mtu = 0;
  // CHORUS_IB_EAGER_BYTES: the size of one eager slot, header included; messages that fit are
  // copied through slots, larger ones are read by the receiver from the sender's buffer.
  size_t slot_bytes = 8192;
  // CHORUS_IB_SLOTS: eager slots per peer (the flow-control window).
  int slots = 32;
  // CHORUS_IB_REG_CACHE_BYTES: registered bytes of user buffers kept after use.
  size_t reg_cache_bytes = size_t{1} << 30;
  // CHORUS_IB_TIMEOUT: the queue pair's ACK timeout exponent (4.096 us * 2^timeout) and
  // CHORUS_IB_RETRY_COUNT its retries: how long a transfer to a dead peer takes to fail.
  int ack_timeout = 14;
  int retry_count = 7;
  // CHORUS_IB_SPIN_US (else CHORUS_SPIN_US): how long the progress thread polls the completion
  // queue after its last completion before it sleeps on the completion channel.
  absl::Duration spin = kDefaultWaitSpin;
  // How often a connection that waits for its peer checks, with an empty RDMA write, that the
  // peer is still there (a dead peer's queue pair answers nothing, and a receive alone never
  // completes with an error).
  absl::Duration liveness_interval = absl::Milliseconds(100);

  static absl::StatusOr<VerbsDeviceOptions> FromEnv();
};

}  // namespace chorus::ibverbs

#endif  // CHORUS_TRANSPORT_IBVERBS_VERBS_OPTIONS_H_
