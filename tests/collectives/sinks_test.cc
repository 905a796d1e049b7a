// The collectives' receive sinks: StreamingSink (and its copy) and ReduceSink.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "chorus/collectives/reduce/reduce_sink.h"
#include "chorus/collectives/reduce/streaming_sink.h"

namespace chorus {
namespace {

std::vector<uint8_t> Bytes(size_t size, uint8_t seed) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return bytes;
}

TEST_CASE("StreamingCopy copies exactly the bytes asked, at every alignment") {
  constexpr size_t kGuard = 32;
  for (size_t size : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{63}, size_t{64},
                      size_t{65}, size_t{200}, size_t{4096 + 3}, size_t{1} << 20}) {
    for (size_t dst_offset = 0; dst_offset < 17; dst_offset += 3) {
      for (size_t src_offset = 0; src_offset < 9; src_offset += 4) {
        INFO(size << " bytes, destination +" << dst_offset << ", source +" << src_offset);
        const std::vector<uint8_t> source = Bytes(size + src_offset, 11);
        std::vector<uint8_t> target(size + dst_offset + kGuard, 0xEE);
        StreamingCopy(target.data() + dst_offset, source.data() + src_offset, size);
        for (size_t i = 0; i < dst_offset; ++i) REQUIRE(target[i] == 0xEE);
        REQUIRE(std::equal(source.begin() + src_offset, source.end(), target.begin() + dst_offset));
        for (size_t i = dst_offset + size; i < target.size(); ++i) REQUIRE(target[i] == 0xEE);
      }
    }
  }
}

TEST_CASE("a StreamingSink puts each piece at its offset") {
  const std::vector<uint8_t> message = Bytes(3 * 4096 + 100, 5);
  std::vector<uint8_t> destination(message.size(), 0);
  StreamingSink sink(destination.data());
  // Out of order, as a transport may hand them over.
  sink.Consume(4096, message.data() + 4096, 4096);
  sink.Consume(0, message.data(), 4096);
  sink.Consume(2 * 4096, message.data() + 2 * 4096, 4096 + 100);
  REQUIRE(destination == message);
}

TEST_CASE("a ReduceSink reduces each piece as received op own, or the whole buffer once") {
  const std::vector<float> received = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
  const std::vector<float> own(received.size(), 100);
  const size_t bytes = received.size() * sizeof(float);
  SECTION("pieces handed over by a transport") {
    std::vector<float> out(received.size(), -1);
    std::vector<float> unused(received.size(), -2);
    ReduceSink sink(DataType::kFloat32, ReduceOp::kSum, own.data(), out.data(), unused.data(),
                    bytes);
    sink.Consume(64, received.data() + 16, bytes - 64);  // the last piece first
    sink.Consume(0, received.data(), 64);
    sink.Finish();  // everything was handed over: nothing more to do
    for (size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == received[i] + 100);
  }
  SECTION("stored in the buffer by the transport, reduced once by Finish") {
    std::vector<float> out = own;  // in place: out is own
    std::vector<float> buffer = received;
    ReduceSink sink(DataType::kFloat32, ReduceOp::kSum, out.data(), out.data(), buffer.data(),
                    bytes);
    sink.Finish();
    sink.Finish();  // idempotent: a second wait must not add again
    for (size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == received[i] + 100);
  }
  SECTION("received is the first operand") {
    // min with a NaN returns its second operand (collectives/reduce/reduce_kernels.h), so the
    // result shows which operand the received value was.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> in = {nan};
    std::vector<float> mine = {7};
    std::vector<float> out = {0};
    ReduceSink sink(DataType::kFloat32, ReduceOp::kMin, mine.data(), out.data(), nullptr,
                    sizeof(float));
    sink.Consume(0, in.data(), sizeof(float));
    // min(received = NaN, own = 7) returns the second operand
    // (collectives/reduce/reduce_kernels.h): 7.
    REQUIRE(out[0] == 7);
  }
}

TEST_CASE("the last-level cache size is known") { REQUIRE(LastLevelCacheBytes() >= (1 << 20)); }

}  // namespace
}  // namespace chorus
