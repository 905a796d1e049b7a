// GPU buffers in the collectives, on machines without a GPU: the whole device-buffer path
// (placement, staging through pinned memory, stream ordering, point-to-point, errors) runs over the
// host stand-in of the GPU runtime (host_gpu_runtime.h), whose streams run their copies only when
// waited for. The same matrix runs on a real GPU in cuda_device_test.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/collectives/communicator.h"
#include "chorus/collectives/staging/staged_pipeline.h"
#include "chorus/core/status.h"
#include "tests/collectives/cases.h"
#include "tests/collectives/world.h"
#include "tests/cuda/host_gpu_runtime.h"
#include "tests/cuda/ipc_cases.h"

namespace chorus::testing {
namespace {

// Installed for one test, uninstalled after it.
class InstalledStandIn {
 public:
  InstalledStandIn() { InstallGpuRuntime(&runtime_); }
  ~InstalledStandIn() { InstallGpuRuntime(nullptr); }
  HostGpuRuntime& runtime() { return runtime_; }

 private:
  HostGpuRuntime runtime_;
};

// Staging only: ranks in separate processes cannot share the stand-in's memory.
CommunicatorOptions StagedOnly() {
  CommunicatorOptions options;
  options.cuda_ipc = false;
  return options;
}

Matrix SmallMatrix() {
  Matrix matrix;
  matrix.types = {DataType::kInt32, DataType::kFloat16, DataType::kUint8};
  return matrix;
}

// Every rank's failure, not only the first: a rank that fails first is the one to read.
void CheckAll(const std::vector<absl::Status>& statuses) {
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].ToString());
    CHECK(statuses[rank].ok());
  }
}

// Every rank failed with `kind`, and its message contains each of `texts`.
void CheckAllFailed(const std::vector<absl::Status>& statuses, ErrorKind kind,
                    const std::vector<std::string>& texts) {
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].ToString());
    CHECK(GetErrorKind(statuses[rank]) == kind);
    for (const std::string& text : texts) {
      CHECK(std::string(statuses[rank].message()).find(text) != std::string::npos);
    }
  }
}

// Every case on `ranks` rank threads over the in-process transport, device buffers on a stream of
// GPU 0 of the stand-in.
void CheckCasesOnThreads(HostGpuRuntime& runtime, const std::vector<Case>& cases, int ranks,
                         const CommunicatorOptions& options = CommunicatorOptions()) {
  void* stream = runtime.MakeStream(0);
  INFO(cases.size() << " cases");
  CheckAll(RunOnThreadsAll(
      TransportKind::kInproc, ranks,
      [&](Communicator& comm) {
        return RunCases(comm, cases, CaseMemory{&runtime, 0, stream});
      },
      absl::Minutes(3), options));
}

// Every case on `ranks` rank processes over shared memory, device buffers on GPU 1 of the
// stand-in (each process its own copy).
void CheckCasesOnProcesses(HostGpuRuntime& runtime, const std::vector<Case>& cases, int ranks,
                           const CommunicatorOptions& options) {
  const absl::Status status = RunOnProcesses(
      TransportKind::kShm, ranks,
      [&](Communicator& comm) {
        return RunCases(comm, cases, CaseMemory{&runtime, 1, nullptr});
      },
      absl::Minutes(3), options);
  CHECK(status.ok());
  if (!status.ok()) FAIL(status.ToString());
}

TEST_CASE("host stand-in: every collective and algorithm on device buffers, 3 ranks as threads",
          "[stand-in]") {
  InstalledStandIn stand_in;
  CheckCasesOnThreads(stand_in.runtime(), BuildCases(SmallMatrix(), 3), 3);
  // The blocks were pinned once and then reused.
  CHECK(stand_in.runtime().pinned_allocations() < 40);
}

TEST_CASE("host stand-in: device buffers over shared memory, 4 ranks as processes", "[stand-in]") {
  InstalledStandIn stand_in;
  Matrix matrix = SmallMatrix();
  matrix.every_algorithm = false;
  matrix.counts = {0, 7, 100000};
  CheckCasesOnProcesses(stand_in.runtime(), BuildCases(matrix, 4), 4, StagedOnly());
}

// Device buffers of `bytes` on the stand-in, freed with the object.
struct DeviceBuffer {
  DeviceBuffer(HostGpuRuntime& runtime, int device, size_t bytes)
      : runtime(runtime), device(device), data(*runtime.AllocateDevice(device, bytes)) {}
  ~DeviceBuffer() { runtime.FreeDevice(device, data); }
  HostGpuRuntime& runtime;
  int device;
  void* data;
};

TEST_CASE("host stand-in: cuda_ipc collectives read the peers' device buffers in place",
          "[stand-in][ipc]") {
  InstalledStandIn stand_in;
  // A stream per rank: each runs its work only when its rank waits for it, so a rank that told
  // its peers it was done before its own work ran is caught.
  std::vector<void*> streams;
  for (int rank = 0; rank < 5; ++rank) streams.push_back(stand_in.runtime().MakeStream(0));
  CommunicatorOptions ipc_always;
  ipc_always.cuda_ipc_min_bytes = 0;
  for (int ranks : {2, 3, 5}) {
    // Three element sizes (the layouts are what is tested here; the kernels are the host's).
    Matrix base = SmallMatrix();
    base.counts = {0, 1, 7, 1000, 100003};
    std::vector<Case> cases = CudaIpcCases(base, ranks, "cuda_ipc");
    // And the automatic choice, which is cuda_ipc for device buffers of ranks on one host (from
    // CommunicatorOptions::cuda_ipc_min_bytes, here 0) where every rank can choose alike: not
    // gatherv, scatterv, alltoallv and alltoall, which are staged unless it is named.
    for (const Case& c : CudaIpcCases(base, ranks, "")) {
      if (c.kind != CollectiveKind::kGatherV && c.kind != CollectiveKind::kScatterV &&
          c.kind != CollectiveKind::kAllToAllV && c.kind != CollectiveKind::kAllToAll) {
        cases.push_back(c);
      }
    }
    const int pinned_before = stand_in.runtime().pinned_allocations();
    INFO(cases.size() << " cases on " << ranks << " ranks");
    CheckAll(RunOnThreadsAll(
        TransportKind::kInproc, ranks,
        [&](Communicator& comm) {
          return RunCases(comm, cases, CaseMemory{&stand_in.runtime(), 0, streams[comm.rank()]});
        },
        absl::Minutes(2), ipc_always));
    // Nothing was staged through pinned memory.
    CHECK(stand_in.runtime().pinned_allocations() == pinned_before);
  }
}

// Rank r's device buffer of `count` floats, each r + 1, on device r; the allreduce's result is
// read back into `out`.
absl::Status AllReduceOnOwnDevice(Communicator& comm, HostGpuRuntime& runtime, size_t count,
                                  std::vector<float>& out) {
  const int device = comm.rank();
  DeviceBuffer buffer(runtime, device, count * sizeof(float));
  const Deadline deadline = Deadline::After(absl::Seconds(5));
  std::vector<float> host(count, static_cast<float>(comm.rank() + 1));
  CHORUS_RETURN_IF_ERROR(
      runtime.CopyAsync(buffer.data, host.data(), host.size() * sizeof(float), device, nullptr));
  CHORUS_RETURN_IF_ERROR(runtime.WaitStream(device, nullptr, deadline));
  CollectiveOptions ipc;
  ipc.algorithm = "cuda_ipc";
  CHORUS_RETURN_IF_ERROR(
      comm.AllReduce(buffer.data, buffer.data, count, DataType::kFloat32, ReduceOp::kSum, ipc));
  out.resize(count);
  CHORUS_RETURN_IF_ERROR(
      runtime.CopyAsync(out.data(), buffer.data, count * sizeof(float), device, nullptr));
  return runtime.WaitStream(device, nullptr, deadline);
}

TEST_CASE("host stand-in: cuda_ipc between thread ranks on different GPUs enables peer access",
          "[stand-in][ipc]") {
  InstalledStandIn stand_in;
  HostGpuRuntime& runtime = stand_in.runtime();
  constexpr size_t kCount = 1000;
  std::vector<std::vector<float>> results(2);
  CheckAll(RunOnThreadsAll(
      TransportKind::kInproc, 2,
      [&](Communicator& comm) {
        return AllReduceOnOwnDevice(comm, runtime, kCount, results[comm.rank()]);
      },
      absl::Minutes(1)));
  for (const std::vector<float>& result : results) {
    REQUIRE(result.size() == kCount);
    CHECK(result.front() == 3.0f);
    CHECK(result.back() == 3.0f);
  }
  CHECK(runtime.peer_access(0, 1));
  CHECK(runtime.peer_access(1, 0));

  // GPUs that cannot reach each other: every rank fails, naming the way out, and the
  // communicator still works once they can.
  runtime.RefusePeerAccess(true);
  std::vector<absl::Status> after(2);
  const std::vector<absl::Status> statuses = RunOnThreadsAll(
      TransportKind::kInproc, 2,
      [&](Communicator& comm) {
        const absl::Status refused =
            AllReduceOnOwnDevice(comm, runtime, kCount, results[comm.rank()]);
        // Both ranks have failed before either goes on.
        CHORUS_RETURN_IF_ERROR(comm.Barrier());
        if (comm.rank() == 0) runtime.RefusePeerAccess(false);
        CHORUS_RETURN_IF_ERROR(comm.Barrier());
        after[comm.rank()] = AllReduceOnOwnDevice(comm, runtime, kCount, results[comm.rank()]);
        return refused;
      },
      absl::Minutes(1));
  for (const absl::Status& status : statuses) {
    INFO(status.ToString());
    CHECK_FALSE(status.ok());
    CHECK(absl::StrContains(status.message(), "allreduce #"));
  }
  // Each rank's own error says what happened and what to do; a peer's names the rank to read.
  const bool named_here = absl::StrContains(statuses[0].message(), "CHORUS_CUDA_IPC=0") ||
                          absl::StrContains(statuses[1].message(), "CHORUS_CUDA_IPC=0");
  CHECK(named_here);
  CheckAll(after);
}

TEST_CASE("host stand-in: allreduces below cuda_ipc_min_bytes are staged, larger ones are not",
          "[stand-in][ipc]") {
  InstalledStandIn stand_in;
  HostGpuRuntime& runtime = stand_in.runtime();
  constexpr size_t kLarge = size_t{1} << 20;  // CommunicatorOptions::cuda_ipc_min_bytes
  int pinned_after_small = -1;
  CheckAll(RunOnThreadsAll(
      TransportKind::kInproc, 2,
      [&](Communicator& comm) -> absl::Status {
        DeviceBuffer buffer(runtime, 0, kLarge);
        CHORUS_RETURN_IF_ERROR(
            comm.AllReduce(buffer.data, buffer.data, 1024, DataType::kUint8, ReduceOp::kSum));
        CHORUS_RETURN_IF_ERROR(comm.Barrier());
        if (comm.rank() == 0) pinned_after_small = runtime.pinned_allocations();
        CHORUS_RETURN_IF_ERROR(comm.Barrier());
        return comm.AllReduce(buffer.data, buffer.data, kLarge, DataType::kUint8, ReduceOp::kSum);
      },
      absl::Minutes(1)));
  CHECK(pinned_after_small > 0);
  CHECK(runtime.pinned_allocations() == pinned_after_small);
}

TEST_CASE("host stand-in: cuda_ipc with host buffers on one rank fails on every rank, naming it",
          "[stand-in][ipc]") {
  InstalledStandIn stand_in;
  HostGpuRuntime& runtime = stand_in.runtime();
  const std::vector<absl::Status> statuses = RunOnThreadsAll(
      TransportKind::kInproc, 3,
      [&](Communicator& comm) -> absl::Status {
        DeviceBuffer buffer(runtime, 0, 4096);
        std::vector<float> host(1024, 1.0f);
        void* data = comm.rank() == 2 ? static_cast<void*>(host.data()) : buffer.data;
        CollectiveOptions ipc;
        ipc.algorithm = "cuda_ipc";
        return comm.AllReduce(data, data, 1024, DataType::kFloat32, ReduceOp::kSum, ipc);
      },
      absl::Minutes(1));
  // The collective and its sequence number, and the rank to look at.
  CheckAllFailed(statuses, ErrorKind::kInvalidArgument,
                 {"rank 2 passed host memory", "allreduce #0 (cuda_ipc"});
  for (const absl::Status& status : statuses) CHECK(ErrorPeerRank(status) == 2);
}

TEST_CASE("host stand-in: an alltoall in place is staged, and refused by a named cuda_ipc",
          "[stand-in][ipc]") {
  InstalledStandIn stand_in;
  HostGpuRuntime& runtime = stand_in.runtime();
  constexpr int kRanks = 3;
  constexpr size_t kPerRank = 1024;
  CommunicatorOptions ipc_always;
  ipc_always.cuda_ipc_min_bytes = 0;
  const int pinned_before = runtime.pinned_allocations();
  const std::vector<absl::Status> statuses = RunOnThreadsAll(
      TransportKind::kInproc, kRanks,
      [&](Communicator& comm) -> absl::Status {
        DeviceBuffer buffer(runtime, 0, kRanks * kPerRank);
        std::vector<uint8_t> host(kRanks * kPerRank);
        for (int q = 0; q < kRanks; ++q) {
          std::memset(host.data() + q * kPerRank, 10 * comm.rank() + q, kPerRank);
        }
        CHORUS_RETURN_IF_ERROR(
            runtime.CopyAsync(buffer.data, host.data(), host.size(), 0, nullptr));
        CHORUS_RETURN_IF_ERROR(runtime.WaitStream(0, nullptr, Deadline::After(absl::Seconds(5))));
        // Not named: staged, and right.
        CHORUS_RETURN_IF_ERROR(comm.AllToAll(buffer.data, buffer.data, kPerRank, DataType::kUint8));
        CHORUS_RETURN_IF_ERROR(
            runtime.CopyAsync(host.data(), buffer.data, host.size(), 0, nullptr));
        CHORUS_RETURN_IF_ERROR(runtime.WaitStream(0, nullptr, Deadline::After(absl::Seconds(5))));
        for (int q = 0; q < kRanks; ++q) {
          if (host[q * kPerRank] != 10 * q + comm.rank()) {
            return InternalError(absl::StrCat("block ", q, " holds ", int{host[q * kPerRank]}));
          }
        }
        // Named: every rank fails, naming a rank whose call is in place.
        CollectiveOptions ipc;
        ipc.algorithm = "cuda_ipc";
        return comm.AllToAll(buffer.data, buffer.data, kPerRank, DataType::kUint8, ipc);
      },
      absl::Minutes(1), ipc_always);
  CHECK(runtime.pinned_allocations() > pinned_before);
  CheckAllFailed(statuses, ErrorKind::kInvalidArgument,
                 {"cannot run an alltoall in place", "alltoall #1 (cuda_ipc"});
}

TEST_CASE("host stand-in: cuda_ipc gatherv counts that disagree fail every rank, which go on",
          "[stand-in][ipc]") {
  InstalledStandIn stand_in;
  HostGpuRuntime& runtime = stand_in.runtime();
  constexpr int kRanks = 3;
  const auto start = std::chrono::steady_clock::now();
  std::vector<absl::Status> after(kRanks);
  const std::vector<absl::Status> statuses = RunOnThreadsAll(
      TransportKind::kInproc, kRanks,
      [&](Communicator& comm) -> absl::Status {
        DeviceBuffer send(runtime, 0, 64);
        DeviceBuffer recv(runtime, 0, 3 * 64);
        // Rank 2 sends 16 elements where the root expects 8 from it; only the root can see it.
        const size_t count = comm.rank() == 2 ? 16 : 8;
        const std::vector<size_t> counts = {8, 8, 8};
        const std::vector<size_t> displs = {0, 8, 16};
        CollectiveOptions ipc;
        ipc.algorithm = "cuda_ipc";
        ipc.timeout = absl::Seconds(60);
        const absl::Status status = comm.GatherV(send.data, count, recv.data, counts, displs,
                                                 DataType::kFloat32, /*root=*/0, ipc);
        // The communicator is not broken: the next collective works.
        after[comm.rank()] =
            comm.AllReduce(send.data, send.data, 8, DataType::kFloat32, ReduceOp::kSum, ipc);
        return status;
      },
      absl::Minutes(1));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The root names the disagreement, the others name the root; all at once, not at the 60 s
  // timeout.
  CheckAllFailed({statuses[0]}, ErrorKind::kMismatch,
                 {"rank 2 holds 64 bytes for rank 0, which expects 32"});
  CheckAllFailed({statuses[1], statuses[2]}, ErrorKind::kMismatch,
                 {"rank 0 found that the ranks' counts disagree"});
  CHECK(seconds < 10);
  CheckAll(after);
}

TEST_CASE("host stand-in: cuda_ipc with vectors only the root passes, and empty blocks",
          "[stand-in][ipc]") {
  InstalledStandIn stand_in;
  HostGpuRuntime& runtime = stand_in.runtime();
  constexpr int kRanks = 3;
  std::vector<void*> streams;
  for (int rank = 0; rank < kRanks; ++rank) streams.push_back(runtime.MakeStream(0));
  auto to_host = [&](const DeviceBuffer& buffer, size_t bytes, void* stream) {
    std::vector<uint8_t> host(bytes);
    if (bytes == 0) return host;
    runtime.CopyAsync(host.data(), buffer.data, bytes, 0, stream).IgnoreError();
    runtime.WaitStream(0, stream, Deadline::After(absl::Seconds(5))).IgnoreError();
    return host;
  };
  CheckAll(RunOnThreadsAll(
      TransportKind::kInproc, kRanks,
      [&](Communicator& comm) -> absl::Status {
        const int r = comm.rank();
        void* stream = streams[r];
        CollectiveOptions ipc;
        ipc.algorithm = "cuda_ipc";
        ipc.cuda_stream = stream;
        // Gatherv and scatterv with root 0: the other ranks pass no counts or displacements;
        // rank 1's block is empty.
        const std::vector<size_t> counts = {3, 0, 5};
        const std::vector<size_t> displs = {5, 0, 0};
        DeviceBuffer mine(runtime, 0, 8);
        DeviceBuffer all(runtime, 0, 8);
        std::vector<uint8_t> fill(8, static_cast<uint8_t>(10 + r));
        CHORUS_RETURN_IF_ERROR(runtime.CopyAsync(mine.data, fill.data(), 8, 0, stream));
        const bool root = r == 0;
        CHORUS_RETURN_IF_ERROR(
            comm.GatherV(mine.data, counts[r], all.data,
                         root ? absl::MakeConstSpan(counts) : absl::Span<const size_t>(),
                         root ? absl::MakeConstSpan(displs) : absl::Span<const size_t>(),
                         DataType::kUint8, 0, ipc));
        if (root) {
          const std::vector<uint8_t> got = to_host(all, 8, stream);
          const std::vector<uint8_t> want = {12, 12, 12, 12, 12, 10, 10, 10};
          if (got != want) return InternalError("gatherv put the blocks in the wrong places");
        }
        // Scatterv back: the root's send is `all`, each rank receives its block into `mine`.
        DeviceBuffer back(runtime, 0, 8);
        CHORUS_RETURN_IF_ERROR(
            comm.ScatterV(root ? all.data : nullptr,
                          root ? absl::MakeConstSpan(counts) : absl::Span<const size_t>(),
                          root ? absl::MakeConstSpan(displs) : absl::Span<const size_t>(),
                          back.data, counts[r], DataType::kUint8, 0, ipc));
        const std::vector<uint8_t> got = to_host(back, counts[r], stream);
        if (got != std::vector<uint8_t>(counts[r], static_cast<uint8_t>(10 + r))) {
          return InternalError(absl::StrCat("scatterv gave rank ", r, " the wrong block"));
        }
        // Alltoallv in which rank 1 receives nothing but sends to everyone.
        std::vector<size_t> send_counts(kRanks), send_displs(kRanks), recv_counts(kRanks),
            recv_displs(kRanks);
        for (int q = 0; q < kRanks; ++q) {
          send_counts[q] = q == 1 ? 0 : 2;
          send_displs[q] = 2 * q;
          recv_counts[q] = r == 1 ? 0 : 2;
          recv_displs[q] = 2 * q;
        }
        DeviceBuffer out(runtime, 0, 2 * kRanks);
        CHORUS_RETURN_IF_ERROR(comm.AllToAllV(mine.data, send_counts, send_displs, out.data,
                                              recv_counts, recv_displs, DataType::kUint8, ipc));
        if (r != 1) {
          const std::vector<uint8_t> all_got = to_host(out, 2 * kRanks, stream);
          for (int q = 0; q < kRanks; ++q) {
            if (all_got[2 * q] != 10 + q || all_got[2 * q + 1] != 10 + q) {
              return InternalError(absl::StrCat("alltoallv: rank ", r, "'s block from ", q));
            }
          }
        }
        return absl::OkStatus();
      },
      absl::Minutes(1)));
}

TEST_CASE("host stand-in: point-to-point and asynchronous collectives on device buffers",
          "[stand-in]") {
  InstalledStandIn stand_in;
  HostGpuRuntime& runtime = stand_in.runtime();
  const absl::Status status = RunOnThreads(
      TransportKind::kInproc, 2,
      [&](Communicator& comm) -> absl::Status {
        const int peer = 1 - comm.rank();
        DeviceBuffer buffer(runtime, 0, 4096);
        std::vector<int32_t> host(1024, comm.rank() + 1);
        CHORUS_RETURN_IF_ERROR(runtime.CopyAsync(buffer.data, host.data(), 4096, 0, nullptr));
        CHORUS_RETURN_IF_ERROR(runtime.WaitStream(0, nullptr, Deadline::Infinite()));
        // Sends from device memory, receives into device memory (auto-detected placement).
        // Rank 1 echoes rank 0's message; rank 0 checks the echo on the host.
        DeviceBuffer echo(runtime, 0, 4096);
        if (comm.rank() == 0) {
          CHORUS_RETURN_IF_ERROR(comm.Send(buffer.data, 1024, DataType::kInt32, peer, 7));
          CHORUS_RETURN_IF_ERROR(comm.Recv(echo.data, 1024, DataType::kInt32, peer, 8));
          std::vector<int32_t> echoed(1024);
          CHORUS_RETURN_IF_ERROR(runtime.CopyAsync(echoed.data(), echo.data, 4096, 0, nullptr));
          CHORUS_RETURN_IF_ERROR(runtime.WaitStream(0, nullptr, Deadline::Infinite()));
          CHORUS_RETURN_IF_ERROR(Expect(echoed == std::vector<int32_t>(1024, 1), "a bad echo"));
        } else {
          CHORUS_RETURN_IF_ERROR(comm.Recv(echo.data, 1024, DataType::kInt32, peer, 7));
          CHORUS_RETURN_IF_ERROR(comm.Send(echo.data, 1024, DataType::kInt32, peer, 8));
        }
        WorkPtr work =
            comm.AllReduceAsync(buffer.data, buffer.data, 1024, DataType::kInt32, ReduceOp::kSum);
        CHORUS_RETURN_IF_ERROR(work->Wait());
        CHORUS_RETURN_IF_ERROR(runtime.CopyAsync(host.data(), buffer.data, 4096, 0, nullptr));
        CHORUS_RETURN_IF_ERROR(runtime.WaitStream(0, nullptr, Deadline::Infinite()));
        // 1 + 2 on both ranks.
        for (int32_t v : host) {
          if (v != 3) {
            return InternalError(absl::StrCat("rank ", comm.rank(), " got ", v));
          }
        }
        return absl::OkStatus();
      },
      absl::Minutes(1));
  CHECK(status.ok());
  if (!status.ok()) FAIL(status.ToString());
}

TEST_CASE("host stand-in: placement errors name what was found", "[stand-in]") {
  InstalledStandIn stand_in;
  HostGpuRuntime& runtime = stand_in.runtime();
  void* other_device_stream = runtime.MakeStream(1);
  const absl::Status status = RunOnThreads(
      TransportKind::kInproc, 1,
      [&](Communicator& comm) -> absl::Status {
        DeviceBuffer device0(runtime, 0, 64);
        DeviceBuffer device1(runtime, 1, 64);
        std::vector<float> host(16);
        CHORUS_RETURN_IF_ERROR(ExpectInvalidArgument(
            comm.AllReduce(device0.data, host.data(), 16, DataType::kFloat32, ReduceOp::kSum),
            "the send buffer is CUDA device memory but the receive buffer is host memory"));
        CollectiveOptions cuda;
        cuda.memory = MemoryPlacement::kCuda;
        CHORUS_RETURN_IF_ERROR(ExpectInvalidArgument(
            comm.AllReduce(host.data(), host.data(), 16, DataType::kFloat32, ReduceOp::kSum, cuda),
            "the send buffer is host memory"));
        CHORUS_RETURN_IF_ERROR(ExpectInvalidArgument(
            comm.AllReduce(device0.data, device1.data, 16, DataType::kFloat32, ReduceOp::kSum),
            "is on CUDA device 0 but the receive buffer on device 1"));
        CollectiveOptions wrong_stream;
        wrong_stream.cuda_stream = other_device_stream;
        CHORUS_RETURN_IF_ERROR(
            ExpectInvalidArgument(comm.AllReduce(device0.data, device0.data, 16, DataType::kFloat32,
                                                 ReduceOp::kSum, wrong_stream),
                                  "the stream belongs to device 1"));
        CHORUS_RETURN_IF_ERROR(ExpectInvalidArgument(
            comm.Send(device0.data, 16, DataType::kFloat32, 0, 1, cuda), "not another rank"));
        // kHost is trusted: no question asked of the runtime, host buffers run as before.
        CollectiveOptions host_only;
        host_only.memory = MemoryPlacement::kHost;
        return comm.AllReduce(host.data(), host.data(), 16, DataType::kFloat32, ReduceOp::kSum,
                              host_only);
      },
      absl::Minutes(1));
  CHECK(status.ok());
  if (!status.ok()) FAIL(status.ToString());
}

TEST_CASE("without a GPU runtime, device placement is an InvalidArgument naming the build",
          "[stand-in]") {
  InstallGpuRuntime(nullptr);
  const absl::Status status = RunOnThreads(
      TransportKind::kInproc, 1,
      [&](Communicator& comm) -> absl::Status {
        std::vector<float> host(16, 1.0f);
        CollectiveOptions cuda;
        cuda.memory = MemoryPlacement::kCuda;
        CHORUS_RETURN_IF_ERROR(ExpectInvalidArgument(
            comm.AllReduce(host.data(), host.data(), 16, DataType::kFloat32, ReduceOp::kSum, cuda),
            "no CUDA support"));
        // The default (kAuto) is host memory when no runtime is installed.
        return comm.AllReduce(host.data(), host.data(), 16, DataType::kFloat32, ReduceOp::kSum);
      },
      absl::Minutes(1));
  CHECK(status.ok());
  if (!status.ok()) FAIL(status.ToString());
}

// Runs `body` on `ranks` in-process ranks with `options` (a 20 s timeout): every rank must
// fail, all within 10 s. Returns their errors.
std::vector<absl::Status> EveryRankFailsPromptly(
    int ranks, CommunicatorOptions options,
    const std::function<absl::Status(Communicator&)>& body) {
  options.timeout = absl::Seconds(20);
  const absl::Time start = absl::Now();
  const std::vector<absl::Status> statuses =
      RunOnThreadsAll(TransportKind::kInproc, ranks, body, absl::Minutes(1), options);
  const absl::Duration took = absl::Now() - start;
  INFO("took " << absl::FormatDuration(took));
  for (size_t r = 0; r < statuses.size(); ++r) {
    INFO("rank " << r << ": " << statuses[r].ToString());
    CHECK_FALSE(statuses[r].ok());
  }
  CHECK(took < absl::Seconds(10));
  return statuses;
}

TEST_CASE("host stand-in: a failed copy fails the collective on every rank promptly",
          "[stand-in]") {
  InstalledStandIn stand_in;
  HostGpuRuntime& runtime = stand_in.runtime();
  // Staged (ranks 0 and 2 pass host memory, so cuda_ipc could not run).
  const std::vector<absl::Status> statuses =
      EveryRankFailsPromptly(3, StagedOnly(), [&](Communicator& comm) -> absl::Status {
        DeviceBuffer buffer(runtime, 0, 4096);
        std::vector<float> host(1024, 1.0f);
        if (comm.rank() == 1) runtime.FailCopies(1);
        // Ranks 0 and 2 stage from host memory; rank 1's device copy fails.
        void* data = comm.rank() == 1 ? buffer.data : static_cast<void*>(host.data());
        return comm.AllReduce(data, data, 1024, DataType::kFloat32, ReduceOp::kSum);
      });
  CHECK(std::string(statuses[1].message()).find("allreduce #0") != std::string::npos);
  CHECK(std::string(statuses[1].message()).find("copying in the CUDA device buffers") !=
        std::string::npos);
  CHECK(std::string(statuses[1].message()).find("cudaMemcpyAsync failed") != std::string::npos);
}

// Staged in segments of 4 KiB: every call of the matrix larger than that runs in segments
// (on messages: the shared slots carry a call whole).
CommunicatorOptions SmallSegments() {
  CommunicatorOptions options = StagedOnly();
  options.cuda_staging_segment_bytes = 4096;
  options.shared_slots = false;
  return options;
}

Matrix SegmentedMatrix() {
  Matrix matrix = SmallMatrix();
  matrix.kinds = {CollectiveKind::kAllReduce, CollectiveKind::kBroadcast, CollectiveKind::kReduce};
  // 2 to 98 segments, the last one short.
  matrix.counts = {5000, 100003};
  return matrix;
}

TEST_CASE("host stand-in: allreduce, broadcast and reduce staged in segments, as threads",
          "[stand-in][pipeline]") {
  InstalledStandIn stand_in;
  CheckCasesOnThreads(stand_in.runtime(), BuildCases(SegmentedMatrix(), 3), 3, SmallSegments());
}

TEST_CASE("host stand-in: allreduce, broadcast and reduce staged in segments, as processes",
          "[stand-in][pipeline]") {
  InstalledStandIn stand_in;
  Matrix matrix = SegmentedMatrix();
  matrix.every_algorithm = false;
  CheckCasesOnProcesses(stand_in.runtime(), BuildCases(matrix, 4), 4, SmallSegments());
}

TEST_CASE("host stand-in: hierarchical calls staged in segments of 512 bytes, on two hosts",
          "[stand-in][pipeline]") {
  // Two hosts of two ranks: the inter-host phase runs in every segment; segments this small
  // ride in the header message of each phase's first message to a peer.
  InstalledStandIn stand_in;
  Matrix matrix = SegmentedMatrix();
  matrix.counts = {20000};
  matrix.algorithms = {"hierarchical"};
  CommunicatorOptions options = SmallSegments();
  options.cuda_staging_segment_bytes = 512;
  options.host_of_rank = {0, 0, 1, 1};
  CheckCasesOnThreads(stand_in.runtime(), BuildCases(matrix, 4), 4, options);
}

// One rank's allreduce of `count` int32 on device buffers in segments of `segment` elements,
// run directly on a StagedPipeline whose segments double their input; records how much work
// was queued on the stream as each segment began.
struct PipelineRun {
  absl::Status status;
  std::vector<size_t> pending_at_segment;
  std::vector<int32_t> result;
  std::string failed_copy;  // what copy_failed was told was being copied
};

PipelineRun RunPipeline(HostGpuRuntime& runtime, bool in_place, size_t count, size_t segment,
                        int failing_segment = -1) {
  void* stream = runtime.MakeStream(0);
  PinnedPool pool(runtime, size_t{1} << 30);
  DeviceBuffer input(runtime, 0, count * sizeof(int32_t));
  DeviceBuffer output(runtime, 0, count * sizeof(int32_t));
  // The stand-in's device memory is host memory.
  int32_t* in = static_cast<int32_t*>(input.data);
  int32_t* out = static_cast<int32_t*>(in_place ? input.data : output.data);
  for (size_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>(i);
  if (!in_place) std::fill(out, out + count, -1);
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllReduce;
  args.send = in;
  args.recv = out;
  args.count = count;
  args.type = DataType::kInt32;
  args.op = ReduceOp::kSum;
  args.cuda_device = 0;
  args.cuda_stream = stream;
  PipelineRun run;
  absl::StatusOr<StagedPipeline> pipeline =
      StagedPipeline::Prepare(runtime, pool, args, 0, 2, segment);
  REQUIRE(pipeline.ok());
  size_t first = 0;
  run.status = pipeline->Run(
      Deadline::After(absl::Seconds(10)),
      [&](const CollectiveArgs& part) -> absl::Status {
        run.pending_at_segment.push_back(runtime.pending_work(0, stream));
        if (static_cast<int>(run.pending_at_segment.size()) - 1 == failing_segment) {
          return AbortedError("segment failed");
        }
        const int32_t* from = static_cast<const int32_t*>(part.send);
        int32_t* to = static_cast<int32_t*>(part.recv);
        for (size_t i = 0; i < part.count; ++i) {
          // The segment's input was copied in before it began.
          if (from[i] != static_cast<int32_t>(first + i)) {
            return InternalError(absl::StrCat("element ", first + i, " not copied in"));
          }
          to[i] = from[i] * 2;
        }
        first += part.count;
        return absl::OkStatus();
      },
      [&](const absl::Status& error, absl::string_view step) {
        run.failed_copy = std::string(step);
        return error;
      });
  // Nothing is left on the stream to write the buffers after the call.
  CHECK(runtime.pending_work(0, stream) == 0);
  run.result.assign(out, out + count);
  return run;
}

TEST_CASE("host stand-in: a staged pipeline copies segment k+1 in and k-1 out while k runs",
          "[stand-in][pipeline]") {
  InstalledStandIn stand_in;
  constexpr size_t kSegment = 256;
  constexpr size_t kCount = 10 * kSegment + 100;  // 11 segments, the last one short
  for (bool in_place : {false, true}) {
    INFO((in_place ? "in place" : "out of place"));
    const PipelineRun run = RunPipeline(stand_in.runtime(), in_place, kCount, kSegment);
    REQUIRE(run.status.ok());
    // Segment 0 begins with segment 1's copy in queued; the middle ones also with the copy
    // out of the segment before the last; the last one with only that copy out.
    std::vector<size_t> expected(11, 2);
    expected.front() = 1;
    expected.back() = 1;
    CHECK(run.pending_at_segment == expected);
    for (size_t i = 0; i < kCount; ++i) {
      INFO("element " << i);
      REQUIRE(run.result[i] == static_cast<int32_t>(2 * i));
    }
  }
}

TEST_CASE("host stand-in: a staged pipeline whose segment fails copies out only those before",
          "[stand-in][pipeline]") {
  InstalledStandIn stand_in;
  constexpr size_t kSegment = 100;
  const PipelineRun run = RunPipeline(stand_in.runtime(), false, 10 * kSegment, kSegment, 3);
  CHECK(absl::IsAborted(run.status));
  CHECK(run.pending_at_segment.size() == 4);
  for (size_t i = 0; i < run.result.size(); ++i) {
    INFO("element " << i);
    REQUIRE(run.result[i] == (i < 3 * kSegment ? static_cast<int32_t>(2 * i) : -1));
  }
}

TEST_CASE("host stand-in: a staged pipeline whose copy fails waits for the copies before it",
          "[stand-in][pipeline]") {
  InstalledStandIn stand_in;
  constexpr size_t kSegment = 100;
  // In: segments 0 and 1; segment 0 runs; out 0 and in 2; segment 1 runs; out 1 fails.
  stand_in.runtime().FailCopies(1, /*after=*/4);
  const PipelineRun run = RunPipeline(stand_in.runtime(), false, 10 * kSegment, kSegment);
  CHECK(absl::StrContains(run.status.message(), "cudaMemcpyAsync failed"));
  CHECK(run.failed_copy == "copying to and from");
  CHECK(run.pending_at_segment.size() == 2);
  for (size_t i = 0; i < run.result.size(); ++i) {
    INFO("element " << i);
    REQUIRE(run.result[i] == (i < kSegment ? static_cast<int32_t>(2 * i) : -1));
  }
}

TEST_CASE("host stand-in: a large allreduce is staged in segments, two copies each per rank",
          "[stand-in][pipeline]") {
  InstalledStandIn stand_in;
  HostGpuRuntime& runtime = stand_in.runtime();
  constexpr size_t kCount = 100003;  // int32: 98 segments of 4 KiB, the last one short
  for (const size_t segment_bytes : {size_t{4096}, size_t{0}}) {
    INFO("segments of " << segment_bytes << " bytes");
    CommunicatorOptions options = SmallSegments();
    options.cuda_staging_segment_bytes = segment_bytes;
    const int copies_before = runtime.copies_queued();
    CheckAll(RunOnThreadsAll(
        TransportKind::kInproc, 2,
        [&](Communicator& comm) -> absl::Status {
          DeviceBuffer buffer(runtime, 0, kCount * sizeof(int32_t));
          int32_t* values = static_cast<int32_t*>(buffer.data);  // host memory in the stand-in
          for (size_t i = 0; i < kCount; ++i) values[i] = static_cast<int32_t>(i) + comm.rank();
          CHORUS_RETURN_IF_ERROR(
              comm.AllReduce(values, values, kCount, DataType::kInt32, ReduceOp::kSum));
          for (size_t i = 0; i < kCount; ++i) {
            if (values[i] != static_cast<int32_t>(2 * i + 1)) {
              return InternalError(absl::StrCat("element ", i, " is ", values[i]));
            }
          }
          return absl::OkStatus();
        },
        absl::Minutes(1), options));
    // In and out per segment (or per call) on each of the two ranks.
    const int expected = segment_bytes == 0 ? 2 * 2 : 2 * 2 * 98;
    CHECK(runtime.copies_queued() - copies_before == expected);
  }
}

TEST_CASE("host stand-in: a copy that fails between segments fails every rank promptly",
          "[stand-in][pipeline]") {
  InstalledStandIn stand_in;
  HostGpuRuntime& runtime = stand_in.runtime();
  constexpr size_t kCount = 10 * 1024;  // float32: 10 segments of 4 KiB
  const std::vector<absl::Status> statuses =
      EveryRankFailsPromptly(2, SmallSegments(), [&](Communicator& comm) -> absl::Status {
        DeviceBuffer buffer(runtime, 0, kCount * sizeof(float));
        std::vector<float> host(kCount, 1.0f);
        // Both ranks queue 20 copies; the ninth after this (the stand-in counts the ranks'
        // copies together) fails, part way through the segments.
        if (comm.rank() == 1) runtime.FailCopies(1, /*after=*/8);
        return comm.AllReduce(buffer.data, buffer.data, kCount, DataType::kFloat32, ReduceOp::kSum);
      });
  bool named = false;
  for (size_t r = 0; r < statuses.size(); ++r) {
    INFO("rank " << r << ": " << statuses[r].ToString());
    CHECK(std::string(statuses[r].message()).find("allreduce #0") != std::string::npos);
    named |= std::string(statuses[r].message())
                 .find(
                     "the CUDA device buffers: cudaMemcpyAsync "
                     "failed") != std::string::npos;
  }
  CHECK(named);
}

TEST_CASE("host stand-in: the staging segment is the default's for large calls only",
          "[stand-in][pipeline]") {
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllReduce;
  args.type = DataType::kFloat32;
  const size_t segment = CommunicatorOptions().cuda_staging_segment_bytes;
  args.count = segment / 4;
  CHECK(PipelineSegmentElements(args, segment) == 0);  // one segment: staged whole
  args.count += 1;
  CHECK(PipelineSegmentElements(args, segment) == segment / 4);
  CHECK(PipelineSegmentElements(args, 0) == 0);
  args.kind = CollectiveKind::kAllGather;  // not elementwise
  CHECK(PipelineSegmentElements(args, segment) == 0);
}

TEST_CASE("host stand-in: ranks that stage in segments and whole fail with a mismatch",
          "[stand-in][pipeline]") {
  InstalledStandIn stand_in;
  HostGpuRuntime& runtime = stand_in.runtime();
  constexpr size_t kCount = 4096;  // 16 KiB: four segments of 4 KiB on device buffers
  const std::vector<absl::Status> statuses = RunOnThreadsAll(
      TransportKind::kInproc, 2,
      [&](Communicator& comm) -> absl::Status {
        DeviceBuffer buffer(runtime, 0, kCount * sizeof(float));
        std::vector<float> host(kCount, 1.0f);
        void* data = comm.rank() == 1 ? static_cast<void*>(host.data()) : buffer.data;
        return comm.AllReduce(data, data, kCount, DataType::kFloat32, ReduceOp::kSum);
      },
      absl::Minutes(1), SmallSegments());
  CheckAllFailed(statuses, ErrorKind::kMismatch,
                 {"allreduce #0", "stages CUDA device buffers in segments"});
}

}  // namespace
}  // namespace chorus::testing
