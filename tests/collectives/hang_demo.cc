// The hang diagnosed in docs/troubleshooting.md: every rank runs two allreduces, but rank 2
// sleeps instead of calling the second one, so the other ranks time out. Run it with chorusrun:
//
//   export CHORUS_COLL_TIMEOUT=3s CHORUS_FLIGHT_RECORDER_FILE=/tmp/flight.%r
//   integrations/launcher/chorusrun.py -n 3 -- bazel-bin/tests/collectives/hang_demo
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "chorus/collectives/communicator.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/rank_env.h"
#include "chorus/rendezvous/store_url.h"
#include "chorus/transport/tcp/tcp_device.h"

namespace chorus {
namespace {

absl::Status Run() {
  CHORUS_ASSIGN_OR_RETURN(const RankIdentity identity, ReadRankIdentity());
  CHORUS_ASSIGN_OR_RETURN(const std::unique_ptr<Store> store, OpenStoreFromEnvironment());
  CHORUS_ASSIGN_OR_RETURN(const std::unique_ptr<Device> device, tcp::CreateTcpDeviceFromEnv());
  CHORUS_ASSIGN_OR_RETURN(
      const std::unique_ptr<Communicator> comm,
      Communicator::Create(*store, "demo/world", *device, identity.rank, identity.size));
  std::vector<float> data(1 << 20, 1.0f);
  for (int i = 0; i < 2; ++i) {
    if (i == 1 && comm->rank() == 2) {
      std::this_thread::sleep_for(std::chrono::seconds(6));  // the bug: no second allreduce
      return absl::OkStatus();
    }
    CHORUS_RETURN_IF_ERROR(
        comm->AllReduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace chorus

int main() {
  const absl::Status status = chorus::Run();
  if (!status.ok()) std::fprintf(stderr, "hang_demo: %s\n", status.ToString().c_str());
  return status.ok() ? 0 : 1;
}
