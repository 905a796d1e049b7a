// Mismatched calls across processes (tests/collectives/mismatch_test covers them with ranks as
// threads; process_test covers a different collective): rank 1 calls with a different count,
// type, op or root. Every rank must fail promptly with a MismatchError (at the latest in its
// next call), and nothing may be written past any buffer (each ends in a guard that must stay
// untouched).
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "tests/collectives/world.h"

namespace chorus::testing {
namespace {

constexpr int kRanks = 4;
constexpr size_t kCount = 1000;
constexpr size_t kGuard = 64;  // bytes after each buffer
constexpr uint8_t kGuardByte = 0xA5;

// One rank's call, given its (zeroed, guarded) buffer of kCount float64 elements plus room.
using Call = std::function<absl::Status(Communicator& comm, void* data)>;

void ExpectMismatch(const std::string& what, const Call& call) {
  INFO(what);
  CommunicatorOptions options;
  options.timeout = absl::Seconds(30);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = RunOnProcesses(
      TransportKind::kTcp, kRanks,
      [&](Communicator& comm) -> absl::Status {
        const size_t bytes = kCount * sizeof(double);
        std::vector<uint8_t> buffer(bytes + kGuard, kGuardByte);
        std::fill(buffer.begin(), buffer.begin() + bytes, 0);
        absl::Status result = call(comm, buffer.data());
        // A rank whose part ended before the news came (a broadcast root whose sends were
        // buffered) fails its next call with the recorded mismatch (collectives.md).
        if (result.ok()) result = comm.Barrier();
        for (size_t i = bytes; i < buffer.size(); ++i) {
          if (buffer[i] != kGuardByte) return InternalError("written past the buffer");
        }
        if (GetErrorKind(result) != ErrorKind::kMismatch) {
          return InternalError("expected a mismatch, got " + result.ToString());
        }
        return absl::OkStatus();
      },
      absl::Minutes(1), options);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(status.ToString());
  CHECK(status.ok());
  CHECK(took < 15);  // against a 30 s timeout: the mismatch, not the deadline, ended the calls
  if (status.ok())
    WARN(what << ": every rank failed with a MismatchError; the whole run took " << took << " s");
}

TEST_CASE("mismatched count, type, op and root across processes") {
  ExpectMismatch("count", [](Communicator& comm, void* data) {
    const size_t count = comm.rank() == 1 ? kCount / 2 : kCount;
    return comm.AllReduce(data, data, count, DataType::kFloat64, ReduceOp::kSum);
  });
  ExpectMismatch("type", [](Communicator& comm, void* data) {
    // float32 x 2n and float64 x n have the same byte length: only the header tells them apart.
    return comm.rank() == 1
               ? comm.AllReduce(data, data, 2 * kCount, DataType::kFloat32, ReduceOp::kSum)
               : comm.AllReduce(data, data, kCount, DataType::kFloat64, ReduceOp::kSum);
  });
  ExpectMismatch("op", [](Communicator& comm, void* data) {
    const ReduceOp op = comm.rank() == 1 ? ReduceOp::kMax : ReduceOp::kSum;
    return comm.AllReduce(data, data, kCount, DataType::kFloat64, op);
  });
  ExpectMismatch("root", [](Communicator& comm, void* data) {
    const int root = comm.rank() == 1 ? 1 : 0;
    return comm.Broadcast(data, data, kCount, DataType::kFloat64, root);
  });
}

}  // namespace
}  // namespace chorus::testing
