// Measures the alpha / beta / gamma of the cost model on this machine: two ranks as threads
// over a transport; alpha from zero-byte ping-pongs (half the round trip), beta from a
// one-way stream of 4 MiB messages, gamma from the float32 sum kernel. The defaults in
// collectives/select/selector.cc come from its output (docs/collectives.md). Then, to check the
// model's choices, it times every allreduce algorithm at a few sizes on `ranks` thread ranks and
// prints which one the selector would pick.
//
//   bazel run //tests/collectives:cost_probe -- tcp [ranks]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "chorus/collectives/reduce/reduce_kernels.h"
#include "chorus/core/status.h"
#include "tests/collectives/world.h"

namespace chorus::testing {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Median time of each allreduce algorithm at a few sizes, and the selector's pick.
int SweepAllReduce(TransportKind kind, int ranks) {
  const std::vector<size_t> sizes = {1 << 10, 16 << 10, 256 << 10, 4 << 20, 32 << 20};
  const std::vector<std::string> algorithms = Communicator::Algorithms(CollectiveKind::kAllReduce);
  std::vector<std::vector<double>> micros(sizes.size(), std::vector<double>(algorithms.size()));
  std::vector<std::string> picks(sizes.size());
  const absl::Status status = RunOnThreads(
      kind, ranks,
      [&](Communicator& comm) -> absl::Status {
        std::vector<float> data(sizes.back() / 4, 1.0f);
        for (size_t s = 0; s < sizes.size(); ++s) {
          const size_t count = sizes[s] / 4;
          const int iterations = sizes[s] >= (4 << 20) ? 5 : 30;
          for (size_t a = 0; a < algorithms.size(); ++a) {
            CollectiveOptions options;
            options.algorithm = algorithms[a];
            std::vector<double> runs;
            for (int i = 0; i < iterations; ++i) {
              CHORUS_RETURN_IF_ERROR(comm.Barrier());
              const auto start = std::chrono::steady_clock::now();
              CHORUS_RETURN_IF_ERROR(comm.AllReduce(data.data(), data.data(), count,
                                                    DataType::kFloat32, ReduceOp::kMax, options));
              runs.push_back(Seconds(std::chrono::steady_clock::now() - start) * 1e6);
            }
            std::sort(runs.begin(), runs.end());
            if (comm.rank() == 0) micros[s][a] = runs[runs.size() / 2];
          }
          if (comm.rank() == 0) {
            CHORUS_ASSIGN_OR_RETURN(picks[s],
                                    comm.ChooseAlgorithm(CollectiveKind::kAllReduce, sizes[s]));
          }
        }
        return absl::OkStatus();
      },
      absl::Minutes(8));
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  std::printf("allreduce float32 on %d ranks, median us (rank 0):\n%10s", ranks, "bytes");
  for (const std::string& name : algorithms) std::printf(" %19s", name.c_str());
  std::printf("  model picks\n");
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::printf("%10zu", sizes[s]);
    for (double t : micros[s]) std::printf(" %19.1f", t);
    std::printf("  %s\n", picks[s].c_str());
  }
  return 0;
}

int Main(int argc, char** argv) {
  const std::string transport = argc > 1 ? argv[1] : "inproc";
  const TransportKind kind = transport == "tcp"   ? TransportKind::kTcp
                             : transport == "shm" ? TransportKind::kShm
                                                  : TransportKind::kInproc;
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
                              : comm.RecvAsync(buffer.data(), kMessage, DataType::kUint8, peer, 2));
        }
        for (WorkPtr& work : works) CHORUS_RETURN_IF_ERROR(work->Wait());
        CHORUS_RETURN_IF_ERROR(comm.Barrier());
        if (comm.rank() == 1) {
          beta_ns =
              Seconds(std::chrono::steady_clock::now() - start) / (kMessage * kMessages) * 1e9;
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
  std::printf(
      "transport %s: alpha %.2f us, beta %.4f ns/byte (%.2f GB/s), gamma %.4f ns/byte "
      "(%s kernels)\n",
      transport.c_str(), alpha_us, beta_ns, 1 / beta_ns, gamma_ns,
      std::string(ReduceKernelSet()).c_str());
  return SweepAllReduce(kind, argc > 2 ? std::atoi(argv[2]) : 4);
}

}  // namespace
}  // namespace chorus::testing

int main(int argc, char** argv) { return chorus::testing::Main(argc, argv); }
