// Measures the alpha / beta / gamma of the cost model on this machine: two ranks as threads
// over a transport; alpha from zero-byte ping-pongs (half the round trip), beta from a
// one-way stream of 4 MiB messages, gamma from the float32 sum kernel. Prints one line per
// quantity; the defaults in selector.cc come from its output (docs/collectives.md).
//
//   bazel run //tests/collectives:cost_probe -- tcp
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "chorus/collectives/reduce_kernels.h"
#include "chorus/core/status.h"
#include "tests/collectives/world.h"

namespace chorus::testing {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

int Main(int argc, char** argv) {
  const std::string transport = argc > 1 ? argv[1] : "inproc";
  const TransportKind kind = transport == "tcp" ? TransportKind::kTcp : TransportKind::kInproc;
  constexpr int kPings = 2000;
  constexpr size_t kMessage = 4 << 20;
  constexpr int kMessages = 32;
  double alpha_us = 0;
  double beta_ns = 0;
  const absl::Status status = RunOnThreads(
      kind, 2,
      [&](Communicator& comm) -> absl::Status {
        const int peer = 1 - comm.rank();
        uint8_t byte = 0;
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < kPings; ++i) {
          if (comm.rank() == 0) {
            CHORUS_RETURN_IF_ERROR(comm.Send(&byte, 0, DataType::kUint8, peer, 1));
            CHORUS_RETURN_IF_ERROR(comm.Recv(&byte, 0, DataType::kUint8, peer, 1));
          } else {
            CHORUS_RETURN_IF_ERROR(comm.Recv(&byte, 0, DataType::kUint8, peer, 1));
            CHORUS_RETURN_IF_ERROR(comm.Send(&byte, 0, DataType::kUint8, peer, 1));
          }
        }
        if (comm.rank() == 0) {
          alpha_us = Seconds(std::chrono::steady_clock::now() - start) / kPings / 2 * 1e6;
        }
        std::vector<uint8_t> buffer(kMessage, 1);
        CHORUS_RETURN_IF_ERROR(comm.Barrier());
        start = std::chrono::steady_clock::now();
        std::vector<WorkPtr> works;
        for (int i = 0; i < kMessages; ++i) {
          works.push_back(comm.rank() == 0
                              ? comm.SendAsync(buffer.data(), kMessage, DataType::kUint8, peer, 2)
                              : comm.RecvAsync(buffer.data(), kMessage, DataType::kUint8, peer,
                                               2));
        }
        for (WorkPtr& work : works) CHORUS_RETURN_IF_ERROR(work->Wait());
        CHORUS_RETURN_IF_ERROR(comm.Barrier());
        if (comm.rank() == 1) {
          beta_ns = Seconds(std::chrono::steady_clock::now() - start) / (kMessage * kMessages) *
                    1e9;
        }
        return absl::OkStatus();
      },
      absl::Minutes(5));
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  std::vector<float> a(16 << 20, 1.0f), b(16 << 20, 2.0f);
  ReduceBuffers(DataType::kFloat32, ReduceOp::kSum, a.data(), b.data(), a.data(), a.size());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 8; ++i) {
    ReduceBuffers(DataType::kFloat32, ReduceOp::kSum, a.data(), b.data(), a.data(), a.size());
  }
  const double gamma_ns =
      Seconds(std::chrono::steady_clock::now() - start) / (8.0 * a.size() * 4) * 1e9;
  std::printf("transport %s: alpha %.2f us, beta %.4f ns/byte (%.2f GB/s), gamma %.4f ns/byte "
              "(%s kernels)\n",
              transport.c_str(), alpha_us, beta_ns, 1 / beta_ns, gamma_ns,
              std::string(ReduceKernelSet()).c_str());
  return 0;
}

}  // namespace
}  // namespace chorus::testing

int main(int argc, char** argv) { return chorus::testing::Main(argc, argv); }
