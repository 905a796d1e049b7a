// A call that repeats a thread's last call on a communicator skips the checks and the choice of
// algorithm (collectives/repeated_call.h): the arguments that decide them must all be part of
// what makes a call a repeat. After calls that were kept, a call that differs in any one of
// them is checked again (and refused when invalid), runs with its own type, op and root, is
// matched against its peers by its own header, and a call kept on one communicator counts for
// no other.
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "chorus/core/status.h"
#include "tests/collectives/test_transport.h"

namespace chorus::testing {
namespace {

const TransportKind kTransport = kTestTransport;
constexpr int kRepeats = 4;

// Runs the same in-place allreduce kRepeats times (so that it is kept) and checks each sum.
absl::Status RepeatSum(Communicator& comm, std::vector<int32_t>& data, size_t count) {
  for (int i = 0; i < kRepeats; ++i) {
    for (size_t j = 0; j < count; ++j) data[j] = comm.rank() + 1;
    CHORUS_RETURN_IF_ERROR(
        comm.AllReduce(data.data(), data.data(), count, DataType::kInt32, ReduceOp::kSum));
    const int32_t expected = comm.size() * (comm.size() + 1) / 2;
    for (size_t j = 0; j < count; ++j) {
      CHORUS_RETURN_IF_ERROR(Expect(data[j] == expected, "repeated sum"));
    }
  }
  return absl::OkStatus();
}

TEST_CASE("a call that differs from the kept one in any argument is checked again",
          "[repeated_call]") {
  const absl::Status status = RunOnThreads(
      kTransport, 2,
      [](Communicator& comm) -> absl::Status {
        std::vector<int32_t> data(8);
        CHORUS_RETURN_IF_ERROR(RepeatSum(comm, data, 4));
        // Each differs from the kept call in one argument and is invalid.
        CHORUS_RETURN_IF_ERROR(ExpectInvalidArgument(
            comm.AllReduce(data.data(), nullptr, 4, DataType::kInt32, ReduceOp::kSum),
            "the receive buffer is null"));
        CHORUS_RETURN_IF_ERROR(ExpectInvalidArgument(
            comm.AllReduce(nullptr, data.data(), 4, DataType::kInt32, ReduceOp::kSum),
            "the send buffer is null"));
        CHORUS_RETURN_IF_ERROR(ExpectInvalidArgument(
            comm.AllReduce(data.data(), data.data() + 1, 4, DataType::kInt32, ReduceOp::kSum),
            "overlap"));
        CHORUS_RETURN_IF_ERROR(ExpectInvalidArgument(
            comm.AllReduce(data.data(), data.data(), std::numeric_limits<size_t>::max() / 2,
                           DataType::kInt32, ReduceOp::kSum),
            "too large"));
        // Kept, then refused with a root out of range.
        for (int i = 0; i < kRepeats; ++i) {
          CHORUS_RETURN_IF_ERROR(comm.Broadcast(data.data(), data.data(), 4, DataType::kInt32, 1));
        }
        CHORUS_RETURN_IF_ERROR(ExpectInvalidArgument(
            comm.Broadcast(data.data(), data.data(), 4, DataType::kInt32, 2), "root 2"));
        // The refusals took no sequence numbers: the ranks are still in step, and the kept
        // call still runs.
        return RepeatSum(comm, data, 4);
      },
      absl::Minutes(1));
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("a call that differs from the kept one in type, op, root or count runs as itself",
          "[repeated_call]") {
  const absl::Status status = RunOnThreads(
      kTransport, 2,
      [](Communicator& comm) -> absl::Status {
        const int r = comm.rank();
        std::vector<int32_t> data(8);
        CHORUS_RETURN_IF_ERROR(RepeatSum(comm, data, 4));
        // Op: max of 1 and 2.
        for (int32_t& x : data) x = r + 1;
        CHORUS_RETURN_IF_ERROR(
            comm.AllReduce(data.data(), data.data(), 4, DataType::kInt32, ReduceOp::kMax));
        CHORUS_RETURN_IF_ERROR(Expect(data[0] == 2 && data[3] == 2, "max after sums"));
        // Type: the same bytes as two float32 values summed.
        std::vector<float> floats(8, 0.5f * static_cast<float>(r + 1));
        CHORUS_RETURN_IF_ERROR(
            comm.AllReduce(floats.data(), floats.data(), 4, DataType::kFloat32, ReduceOp::kSum));
        CHORUS_RETURN_IF_ERROR(Expect(floats[0] == 1.5f, "float sum"));
        // Count: 8 elements where the kept call reduced 4.
        CHORUS_RETURN_IF_ERROR(RepeatSum(comm, data, 4));
        for (int32_t& x : data) x = r + 1;
        CHORUS_RETURN_IF_ERROR(
            comm.AllReduce(data.data(), data.data(), 8, DataType::kInt32, ReduceOp::kSum));
        CHORUS_RETURN_IF_ERROR(Expect(data[7] == 3, "the elements the kept call left out"));
        // Root: kept from rank 0, then from rank 1.
        for (int i = 0; i < kRepeats; ++i) {
          for (int32_t& x : data) x = r == 0 ? 10 + i : -1;
          CHORUS_RETURN_IF_ERROR(comm.Broadcast(data.data(), data.data(), 4, DataType::kInt32, 0));
          CHORUS_RETURN_IF_ERROR(Expect(data[3] == 10 + i, "broadcast from rank 0"));
        }
        for (int32_t& x : data) x = r == 1 ? 77 : -1;
        CHORUS_RETURN_IF_ERROR(comm.Broadcast(data.data(), data.data(), 4, DataType::kInt32, 1));
        CHORUS_RETURN_IF_ERROR(Expect(data[0] == 77 && data[3] == 77, "broadcast from rank 1"));
        // A broadcast root may return before its peer has read: the barrier keeps it from
        // tearing its mesh down under the reader.
        return comm.Barrier();
      },
      absl::Minutes(1));
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("a rank that changes a kept call while its peer repeats it fails with a mismatch",
          "[repeated_call]") {
  CommunicatorOptions options;
  options.timeout = absl::Seconds(30);
  const std::vector<absl::Status> statuses = RunOnThreadsAll(
      kTransport, 2,
      [](Communicator& comm) -> absl::Status {
        std::vector<int32_t> data(8);
        CHORUS_RETURN_IF_ERROR(RepeatSum(comm, data, 4));
        // Rank 1 reduces 3 elements where rank 0 repeats its call of 4; a rank whose part
        // ended before the news reached it fails one of the barriers after.
        absl::Status status = comm.AllReduce(data.data(), data.data(), comm.rank() == 1 ? 3 : 4,
                                             DataType::kInt32, ReduceOp::kSum);
        if (status.ok()) status = comm.Barrier();
        if (status.ok()) status = comm.Barrier();
        return status;
      },
      absl::Minutes(1), options);
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].ToString());
    CHECK(GetErrorKind(statuses[rank]) == ErrorKind::kMismatch);
  }
}

TEST_CASE("a call kept on one communicator is checked again on another", "[repeated_call]") {
  const absl::Status status = RunOnThreads(
      kTransport, 2,
      [](Communicator& world) -> absl::Status {
        std::vector<int32_t> data(4, 5);
        // Made first: the split's own calls on the world would replace a call kept before it.
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> alone, world.Split(world.rank(), 0));
        CHORUS_RETURN_IF_ERROR(Expect(alone->size() == 1, "a split of one rank each"));
        // Root 1 is a rank of the world of 2, kept there ...
        for (int i = 0; i < kRepeats; ++i) {
          CHORUS_RETURN_IF_ERROR(world.Broadcast(data.data(), data.data(), 4, DataType::kInt32, 1));
        }
        // ... and no rank of a communicator of one.
        CHORUS_RETURN_IF_ERROR(ExpectInvalidArgument(
            alone->Broadcast(data.data(), data.data(), 4, DataType::kInt32, 1), "root 1"));
        // The world's call still runs after the other communicator's check; the barrier keeps
        // the root from tearing its mesh down before its peer has read.
        CHORUS_RETURN_IF_ERROR(world.Broadcast(data.data(), data.data(), 4, DataType::kInt32, 1));
        return world.Barrier();
      },
      absl::Minutes(1));
  INFO(status.ToString());
  CHECK(status.ok());
}

}  // namespace
}  // namespace chorus::testing
