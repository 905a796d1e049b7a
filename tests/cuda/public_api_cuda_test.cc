// CUDA device buffers through the installable library (libchorus.a of a --config=cuda build)
// and its public C++ and C APIs only, as a framework would use them: two rank threads on one
// GPU allreduce and broadcast device buffers ordered on their own streams. "SKIPPED: <why>"
// without a GPU.
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"

namespace {

// A rank's run: "" when every check held, else the first failure.
std::string RunRank(const std::string& dir, int rank, int ranks) {
  auto store = chorus::Store::Open("file://" + dir);
  auto device = chorus::Device::Create("tcp");
  if (!store.ok() || !device.ok()) return "setup failed";
  auto comm = chorus::Communicator::Create(*store, "cuda", *device, rank, ranks);
  if (!comm.ok()) return "Create: " + comm.status().ToString();
  constexpr size_t kCount = 1 << 20;
  cudaStream_t stream;
  if (cudaStreamCreate(&stream) != cudaSuccess) return "cudaStreamCreate failed";
  float* data = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&data), kCount * sizeof(float)) != cudaSuccess)
    return "cudaMalloc failed";
  std::vector<float> host(kCount, static_cast<float>(rank + 1));
  // Queued on the stream, not waited for: the collective must start after it.
  cudaMemcpyAsync(data, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice, stream);
  chorus::CallOptions options;
  options.memory = chorus::MemoryType::kCuda;
  options.cuda_stream = stream;
  chorus::Status status = comm->AllReduce(data, data, kCount, chorus::DataType::kFloat32,
                                          chorus::ReduceOp::kSum, options);
  if (!status.ok()) return "AllReduce: " + status.ToString();
  cudaMemcpyAsync(host.data(), data, kCount * sizeof(float), cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  const float sum = ranks * (ranks + 1) / 2.0f;
  for (float v : host) {
    if (v != sum)
      return "AllReduce gave " + std::to_string(v) + ", expected " + std::to_string(sum);
  }
  // The C API, with the placement left to detection (CHORUS_MEMORY_AUTO).
  chorus_call_options_t c_options = CHORUS_CALL_OPTIONS_INIT;
  c_options.cuda_stream = stream;
  if (rank == 0) {
    host.assign(kCount, 42.0f);
    cudaMemcpyAsync(data, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice, stream);
  }
  if (chorus_broadcast(comm->c_handle(), data, data, kCount, CHORUS_FLOAT32, 0, &c_options) !=
      CHORUS_OK) {
    return std::string("chorus_broadcast: ") + chorus_last_error();
  }
  cudaMemcpyAsync(host.data(), data, kCount * sizeof(float), cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  for (float v : host) {
    if (v != 42.0f) return "Broadcast gave " + std::to_string(v);
  }
  // A host buffer passed as device memory is refused, naming it.
  std::vector<float> plain(16);
  status = comm->AllReduce(plain.data(), plain.data(), 16, chorus::DataType::kFloat32,
                           chorus::ReduceOp::kSum, options);
  if (status.kind() != chorus::ErrorKind::kInvalidArgument ||
      status.message().find("is host memory") == std::string::npos) {
    return "a host buffer as kCuda: " + status.ToString();
  }
  cudaFree(data);
  cudaStreamDestroy(stream);
  return "";
}

TEST_CASE("device buffers through the public API of libchorus", "[gpu]") {
  int devices = 0;
  if (access("/dev/nvidiactl", F_OK) != 0 || cudaGetDeviceCount(&devices) != cudaSuccess ||
      devices == 0) {
    WARN("SKIPPED: no usable GPU (no NVIDIA driver or no device)");
    return;
  }
  const char* base = getenv("TEST_TMPDIR");
  std::string dir = std::string(base ? base : "/tmp") + "/public_api_cuda_test.XXXXXX";
  REQUIRE(mkdtemp(dir.data()) != nullptr);
  constexpr int kRanks = 2;
  std::vector<std::string> failures(kRanks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kRanks; ++rank) {
    threads.emplace_back([&, rank] { failures[rank] = RunRank(dir, rank, kRanks); });
  }
  for (std::thread& thread : threads) thread.join();
  std::system(("rm -rf '" + dir + "'").c_str());
  for (int rank = 0; rank < kRanks; ++rank) {
    INFO("rank " << rank << ": " << failures[rank]);
    CHECK(failures[rank].empty());
  }
}

}  // namespace
