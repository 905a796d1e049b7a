// On a real GPU (--config=cuda builds; "SKIPPED: <why>" without a GPU): the device reduction
// kernels against the host kernels for every type and op, and the collectives matrix on device
// buffers with ranks as processes sharing the GPU, over shared memory and TCP (and the collectives
// that cuda_ipc serves through CUDA IPC, and those staged in segments). tools/gpu_check.sh runs the
// processes case first and alone: the parent must not touch CUDA before it forks.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

#include "chorus/collectives/reduce/reduce_kernels.h"
#include "chorus/cuda/cuda_runtime.h"
#include "tests/collectives/cases.h"
#include "tests/collectives/world.h"
#include "tests/cuda/ipc_cases.h"

namespace chorus::testing {
namespace {

// Whether this machine has an NVIDIA driver, asked without initialising CUDA.
bool HasNvidiaDriver() { return access("/dev/nvidiactl", F_OK) == 0; }

TEST_CASE("every collective on device buffers, ranks as processes", "[gpu][processes]") {
  if (!HasNvidiaDriver()) {
    WARN("SKIPPED: no NVIDIA driver on this machine (/dev/nvidiactl is absent)");
    return;
  }
  for (TransportKind transport : {TransportKind::kShm, TransportKind::kTcp}) {
    for (int ranks : {2, 3, 4}) {
      Matrix matrix;
      matrix.types = {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64};
      matrix.counts = {0, 7, 1000, 300000};
      matrix.every_algorithm = ranks == 3;
      std::vector<Case> cases = BuildCases(matrix, ranks);
      // And every collective through CUDA IPC, named (over any transport of one host).
      for (const Case& c : CudaIpcCases(matrix, ranks, "cuda_ipc")) cases.push_back(c);
      const absl::Status status = RunOnProcesses(
          transport, ranks,
          [&](Communicator& comm) {
            return RunCases(comm, cases, CaseMemory{InstalledGpuRuntime(), 0, nullptr});
          },
          absl::Minutes(4));
      INFO(cases.size() << " cases, " << ranks << " ranks over " << TransportName(transport));
      CHECK(status.ok());
      if (!status.ok()) FAIL(status.ToString());
    }
    // Allreduce, broadcast and reduce staged in segments of 64 KiB (on messages: the shared
    // slots carry a call whole), so that the copies of one segment run beside the next one's.
    Matrix segmented;
    segmented.kinds = {CollectiveKind::kAllReduce, CollectiveKind::kBroadcast,
                       CollectiveKind::kReduce};
    segmented.types = {DataType::kFloat32, DataType::kBFloat16};
    segmented.counts = {300001};
    segmented.every_algorithm = false;
    const std::vector<Case> cases = BuildCases(segmented, 3);
    CommunicatorOptions options;
    options.cuda_ipc = false;
    options.shared_slots = false;
    options.cuda_staging_segment_bytes = size_t{64} << 10;
    const absl::Status status = RunOnProcesses(
        transport, 3,
        [&](Communicator& comm) {
          return RunCases(comm, cases, CaseMemory{InstalledGpuRuntime(), 0, nullptr});
        },
        absl::Minutes(4), options);
    INFO(cases.size() << " cases staged in segments over " << TransportName(transport));
    CHECK(status.ok());
    if (!status.ok()) FAIL(status.ToString());
  }
}

// Bit for bit, except that two NaNs are equal (their payload bits may differ).
bool SameElements(DataType type, const std::vector<uint8_t>& x, const std::vector<uint8_t>& y) {
  const size_t elem = DataTypeSize(type);
  const bool floating = type == DataType::kFloat16 || type == DataType::kBFloat16 ||
                        type == DataType::kFloat32 || type == DataType::kFloat64;
  for (size_t i = 0; i < x.size(); i += elem) {
    if (std::memcmp(&x[i], &y[i], elem) == 0) continue;
    if (!floating) return false;
    const double a = ElementValue(type, x.data(), i / elem);
    const double b = ElementValue(type, y.data(), i / elem);
    if (!(a != a && b != b)) return false;
  }
  return true;
}

TEST_CASE("device reduction kernels match the host kernels for every type and op",
          "[gpu][kernels]") {
  GpuRuntime* runtime = InstalledGpuRuntime();
  const absl::Status available = runtime->Available();
  if (!available.ok()) {
    WARN("SKIPPED: no usable GPU: " << available.message());
    return;
  }
  constexpr size_t kCount = (1 << 20) + 3;  // a tail after the 16-byte vectors
  std::mt19937 generator(5);
  for (int t = 0; t < kNumDataTypes; ++t) {
    const DataType type = static_cast<DataType>(t);
    const size_t bytes = kCount * DataTypeSize(type);
    // Three random buffers, and a fourth one byte into an allocation (no 16-byte vectors).
    std::vector<std::vector<uint8_t>> host_inputs(4, std::vector<uint8_t>(bytes));
    std::vector<void*> allocations;
    std::vector<const void*> device_inputs;
    for (std::vector<uint8_t>& input : host_inputs) {
      for (auto& byte : input) byte = static_cast<uint8_t>(generator());
      void* allocation = *runtime->AllocateDevice(0, bytes + 1);
      allocations.push_back(allocation);
      void* at = static_cast<char*>(allocation) + (device_inputs.size() == 3 ? 1 : 0);
      REQUIRE(runtime->CopyAsync(at, input.data(), bytes, 0, nullptr).ok());
      device_inputs.push_back(at);
    }
    void* dd = *runtime->AllocateDevice(0, bytes);
    // Two inputs; three; the unaligned one among them; and 18, more than one launch takes.
    const std::vector<std::vector<int>> choices = {
        {0, 1}, {0, 1, 2}, {2, 3, 0}, {0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}};
    for (const std::vector<int>& choice : choices) {
      std::vector<const void*> inputs;
      for (int k : choice) inputs.push_back(device_inputs[k]);
      for (int o = 0; o < kNumReduceOps; ++o) {
        const ReduceOp op = static_cast<ReduceOp>(o);
        // The host kernels pairwise, in input order.
        std::vector<uint8_t> host = host_inputs[choice[0]], device(bytes);
        for (size_t k = 1; k < choice.size(); ++k) {
          ReduceBuffers(type, op, host.data(), host_inputs[choice[k]].data(), host.data(), kCount);
        }
        if (op == ReduceOp::kAvg) {
          DivideBuffer(type, host.data(), kCount, static_cast<int>(choice.size()));
        }
        REQUIRE(runtime->ReduceAsync(type, op, inputs, dd, kCount, 0, nullptr).ok());
        REQUIRE(runtime->CopyAsync(device.data(), dd, bytes, 0, nullptr).ok());
        REQUIRE(runtime->WaitStream(0, nullptr, Deadline::After(absl::Seconds(30))).ok());
        INFO(DataTypeName(type) << " " << ReduceOpName(op) << " of " << choice.size() << " inputs");
        CHECK(SameElements(type, host, device));
      }
    }
    for (void* allocation : allocations) runtime->FreeDevice(0, allocation);
    runtime->FreeDevice(0, dd);
  }
}

TEST_CASE("a host pointer passed as device memory is an InvalidArgument", "[gpu][errors]") {
  GpuRuntime* runtime = InstalledGpuRuntime();
  if (!runtime->Available().ok()) {
    WARN("SKIPPED: no usable GPU: " << runtime->Available().message());
    return;
  }
  const absl::Status status = RunOnThreads(
      TransportKind::kInproc, 1,
      [&](Communicator& comm) -> absl::Status {
        std::vector<float> host(16, 1.0f);
        CollectiveOptions cuda;
        cuda.memory = MemoryPlacement::kCuda;
        return ExpectInvalidArgument(
            comm.AllReduce(host.data(), host.data(), 16, DataType::kFloat32, ReduceOp::kSum, cuda),
            "is host memory");
      },
      absl::Minutes(1));
  CHECK(status.ok());
  if (!status.ok()) FAIL(status.ToString());
}

}  // namespace
}  // namespace chorus::testing
