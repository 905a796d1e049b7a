// Determinism: with inputs whose sums round (random floats, not integers), every rank ends an
// allreduce with bitwise identical results for every algorithm, and running the same
// algorithm again on the same inputs gives the same bits. Checked for float32, float16 and
// bfloat16 at sizes that run one and many pipeline segments.
#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chorus/core/half.h"
#include "chorus/core/status.h"
#include "tests/collectives/test_transport.h"

namespace chorus::testing {
namespace {

std::vector<uint8_t> RandomBytes(DataType type, size_t count, int seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<uint8_t> bytes(count * DataTypeSize(type));
  for (size_t i = 0; i < count; ++i) {
    const float v = value(rng);
    if (type == DataType::kFloat32) {
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    } else {
      const uint16_t h = type == DataType::kFloat16 ? Float16(v).bits : BFloat16(v).bits;
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

absl::Status CheckDeterministic(Communicator& comm, DataType type, size_t count) {
  const std::vector<uint8_t> input = RandomBytes(type, count, 1 + comm.rank());
  const size_t bytes = input.size();
  for (const std::string& algorithm : Communicator::Algorithms(CollectiveKind::kAllReduce)) {
    CollectiveOptions options;
    options.algorithm = algorithm;
    std::vector<uint8_t> first(bytes), second(bytes), all(bytes * comm.size());
    CHORUS_RETURN_IF_ERROR(
        comm.AllReduce(input.data(), first.data(), count, type, ReduceOp::kSum, options));
    CHORUS_RETURN_IF_ERROR(
        comm.AllReduce(input.data(), second.data(), count, type, ReduceOp::kSum, options));
    if (first != second) {
      return InternalError(absl::StrCat(algorithm, ": a repeated run gave different bits"));
    }
    CHORUS_RETURN_IF_ERROR(comm.AllGather(first.data(), all.data(), bytes, DataType::kUint8));
    for (int q = 0; q < comm.size(); ++q) {
      if (std::memcmp(all.data() + q * bytes, first.data(), bytes) != 0) {
        return InternalError(absl::StrCat(algorithm, ": rank ", q, " and rank ", comm.rank(),
                                          " hold different bits"));
      }
    }
  }
  return absl::OkStatus();
}

TEST_CASE("allreduce results are bitwise identical on all ranks and across runs", "[determinism]") {
  CommunicatorOptions options;
  options.segment_bytes = 16 * 1024;  // many segments at the larger size
  for (int ranks : {3, 4, 7}) {
    const absl::Status status = RunOnThreads(
        kTestTransport, ranks,
        [](Communicator& comm) -> absl::Status {
          for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
            for (size_t count : {size_t{1001}, size_t{100003}}) {
              CHORUS_RETURN_IF_ERROR(CheckDeterministic(comm, type, count));
            }
          }
          return absl::OkStatus();
        },
        absl::Minutes(3), options);
    INFO(ranks << " ranks: " << status.ToString());
    CHECK(status.ok());
  }
}

}  // namespace
}  // namespace chorus::testing
