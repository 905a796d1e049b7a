// The GPU figures of tools/gpu_check.sh, measured in one run: device-to-device copy bandwidth
// (the machine's limit), the device reduction kernels' bandwidth against it, and a 2-rank
// allreduce over shared memory between processes with host buffers and with device buffers
// (staged through pinned memory). Prints one line per figure.
//
//   gpu_bench [--bytes N]   (default 256 MiB)
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "chorus/collectives/communicator.h"
#include "chorus/cuda/gpu_runtime.h"
#include "tests/collectives/world.h"

namespace chorus {
namespace {

constexpr int kIterations = 10;

// GB/s of `bytes_moved` per call, from the median of kIterations timed calls of `run`.
template <typename Run>
double DeviceBandwidth(size_t bytes_moved, const Run& run) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms;
  run();  // warm-up
  for (int i = 0; i < kIterations; ++i) {
    cudaEventRecord(start);
    run();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float elapsed = 0;
    cudaEventElapsedTime(&elapsed, start, stop);
    ms.push_back(elapsed);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return bytes_moved / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

// Median seconds of a 2-rank allreduce of `bytes` over shared memory, ranks as processes, with
// host or device buffers; device buffers through CUDA IPC (the default on one host) or staged
// through pinned memory, in segments of `staging_segment` bytes (0: whole). -1 on failure
// (printed).
double AllReduceSeconds(size_t bytes, bool device, bool ipc,
                        size_t staging_segment = CommunicatorOptions().cuda_staging_segment_bytes) {
  const std::string file = std::string("/tmp/chorus_gpu_bench_") + (device ? "d" : "h");
  CommunicatorOptions options;
  options.cuda_ipc = ipc;
  options.cuda_staging_segment_bytes = staging_segment;
  const absl::Status status = testing::RunOnProcesses(
      testing::TransportKind::kShm, 2,
      [&](Communicator& comm) -> absl::Status {
        GpuRuntime* runtime = InstalledGpuRuntime();
        void* data = nullptr;
        std::vector<float> host;
        if (device) {
          auto allocated = runtime->AllocateDevice(0, bytes);
          if (!allocated.ok()) return allocated.status();
          data = *allocated;
          cudaMemset(data, 0, bytes);
        } else {
          host.assign(bytes / sizeof(float), 1.0f);
          data = host.data();
        }
        std::vector<double> seconds;
        for (int i = 0; i < kIterations + 1; ++i) {
          const absl::Time start = absl::Now();
          absl::Status s =
              comm.AllReduce(data, data, bytes / sizeof(float), DataType::kFloat32, ReduceOp::kSum);
          if (!s.ok()) return s;
          if (i > 0) seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
        }
        if (device) runtime->FreeDevice(0, data);
        std::sort(seconds.begin(), seconds.end());
        if (comm.rank() == 0) {
          FILE* out = std::fopen(file.c_str(), "w");
          if (out != nullptr) {
            std::fprintf(out, "%.9f\n", seconds[seconds.size() / 2]);
            std::fclose(out);
          }
        }
        return absl::OkStatus();
      },
      absl::Minutes(5), options);
  if (!status.ok()) {
    std::printf("allreduce (%s buffers) failed: %s\n", device ? "device" : "host",
                std::string(status.message()).c_str());
    return -1;
  }
  double value = -1;
  if (FILE* in = std::fopen(file.c_str(), "r")) {
    if (std::fscanf(in, "%lf", &value) != 1) value = -1;
    std::fclose(in);
  }
  std::remove(file.c_str());
  return value;
}

int Main(int argc, char** argv) {
  size_t bytes = size_t{256} << 20;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--bytes") == 0) bytes = std::strtoull(argv[i + 1], nullptr, 10);
  }
  // Asked without initialising CUDA: the parent must not have touched it when it forks.
  if (access("/dev/nvidiactl", F_OK) != 0) {
    std::printf("SKIPPED: no NVIDIA driver on this machine (/dev/nvidiactl is absent)\n");
    return 0;
  }
  const double host_s = AllReduceSeconds(bytes, false, false);
  const double staged_s = AllReduceSeconds(bytes, true, false);
  const double staged_whole_s = AllReduceSeconds(bytes, true, false, /*staging_segment=*/0);
  const double ipc_s = AllReduceSeconds(bytes, true, true);
  const double mib = bytes / 1048576.0;
  // busbw of a 2-rank allreduce: algbw x 2(n-1)/n = algbw.
  std::printf(
      "allreduce 2 ranks shm %.0f MiB float32, host buffers:            %.2f ms, busbw "
      "%.2f GB/s\n",
      mib, host_s * 1e3, bytes / host_s / 1e9);
  std::printf(
      "allreduce 2 ranks shm %.0f MiB float32, device buffers, staged in %.0f MiB segments: "
      "%.2f ms, busbw %.2f GB/s (%.2fx the host-buffer time)\n",
      mib, CommunicatorOptions().cuda_staging_segment_bytes / 1048576.0, staged_s * 1e3,
      bytes / staged_s / 1e9, staged_s / host_s);
  std::printf(
      "allreduce 2 ranks shm %.0f MiB float32, device buffers, staged whole: %.2f ms, busbw "
      "%.2f GB/s (%.2fx the host-buffer time)\n",
      mib, staged_whole_s * 1e3, bytes / staged_whole_s / 1e9, staged_whole_s / host_s);
  std::printf(
      "allreduce 2 ranks %.0f MiB float32, device buffers, cuda_ipc:    %.2f ms, busbw "
      "%.2f GB/s\n",
      mib, ipc_s * 1e3, bytes / ipc_s / 1e9);

  GpuRuntime* runtime = InstalledGpuRuntime();
  const absl::Status available = runtime->Available();
  if (!available.ok()) {
    std::printf("SKIPPED: no usable GPU: %s\n", std::string(available.message()).c_str());
    return 0;
  }
  std::printf("%s\n", runtime->Describe().c_str());
  void* a = *runtime->AllocateDevice(0, bytes);
  void* b = *runtime->AllocateDevice(0, bytes);
  void* dst = *runtime->AllocateDevice(0, bytes);
  cudaMemset(a, 0, bytes);
  cudaMemset(b, 0, bytes);
  // A copy reads and writes every byte: 2 x bytes of memory traffic.
  const double copy = DeviceBandwidth(
      2 * bytes, [&] { cudaMemcpyAsync(dst, a, bytes, cudaMemcpyDeviceToDevice, nullptr); });
  std::printf(
      "cudaMemcpy device to device %.0f MiB: %.1f GB/s of memory traffic, %.1f GB/s "
      "copied\n",
      mib, copy, copy / 2);
  std::printf("cuda_ipc allreduce busbw / device-to-device copy rate: %.0f%%\n",
              100 * (bytes / ipc_s / 1e9) / (copy / 2));
  for (DataType type : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16,
                        DataType::kFloat64, DataType::kInt8}) {
    const size_t count = bytes / DataTypeSize(type);
    // dst = a + b reads two buffers and writes one: 3 x bytes.
    const double reduce = DeviceBandwidth(3 * bytes, [&] {
      runtime->ReduceAsync(type, ReduceOp::kSum, {a, b}, dst, count, 0, nullptr).IgnoreError();
    });
    std::printf("reduce kernel %-8s sum %.0f MiB: %.1f GB/s (%.0f%% of the copy's)\n",
                std::string(DataTypeName(type)).c_str(), mib, reduce, 100 * reduce / copy);
  }
  // Four inputs in one pass, as cuda_ipc reduces four ranks' blocks: reads four, writes one.
  const double four = DeviceBandwidth(5 * bytes, [&] {
    runtime
        ->ReduceAsync(DataType::kFloat32, ReduceOp::kSum, {a, b, a, b}, dst, bytes / sizeof(float),
                      0, nullptr)
        .IgnoreError();
  });
  std::printf("reduce kernel float32 sum of 4 inputs %.0f MiB: %.1f GB/s (%.0f%% of the copy's)\n",
              mib, four, 100 * four / copy);
  runtime->FreeDevice(0, a);
  runtime->FreeDevice(0, b);
  runtime->FreeDevice(0, dst);
  return 0;
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) { return chorus::Main(argc, argv); }
