// The vectorised reduction kernels against a scalar reference computed here: every type and
// op, lengths around the vector widths, in place and out of place, and (for the 16-bit floats)
// random bit patterns so that rounding, subnormals and overflow are compared exactly.
#include "chorus/collectives/reduce/reduce_kernels.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "chorus/core/half.h"
#include "chorus/core/types.h"

namespace chorus {
namespace {

template <typename T>
T Reference(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return static_cast<T>(a + b);
    case ReduceOp::kProd:
      return static_cast<T>(a * b);
    case ReduceOp::kMin:
      return a < b ? a : b;
    case ReduceOp::kMax:
      return a > b ? a : b;
  }
  return a;
}

template <typename T>
void CheckIntegerOrFloat(DataType type) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> small(-9, 9);
  for (size_t n : {0, 1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 1000}) {
    for (int op = 0; op < kNumReduceOps; ++op) {
      std::vector<T> a(n), b(n), out(n), expected(n);
      for (size_t i = 0; i < n; ++i) {
        a[i] = static_cast<T>(small(rng));
        b[i] = static_cast<T>(small(rng));
        expected[i] = Reference(static_cast<ReduceOp>(op), a[i], b[i]);
      }
      ReduceBuffers(type, static_cast<ReduceOp>(op), a.data(), b.data(), out.data(), n);
      CHECK(out == expected);
      ReduceBuffers(type, static_cast<ReduceOp>(op), a.data(), b.data(), a.data(), n);
      CHECK(a == expected);
    }
  }
}

template <typename H>
void CheckHalf(DataType type) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffff);
  const size_t n = 4099;
  for (int op = 0; op < kNumReduceOps; ++op) {
    std::vector<uint16_t> a(n), b(n), out(n);
    for (size_t i = 0; i < n; ++i) {
      // NaN payloads may differ between conversions; everything else must match bit for bit.
      do a[i] = static_cast<uint16_t>(bits(rng));
      while (std::isnan(H::ToFloat(a[i])));
      do b[i] = static_cast<uint16_t>(bits(rng));
      while (std::isnan(H::ToFloat(b[i])));
    }
    ReduceBuffers(type, static_cast<ReduceOp>(op), a.data(), b.data(), out.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const float expected =
          Reference(static_cast<ReduceOp>(op), H::ToFloat(a[i]), H::ToFloat(b[i]));
      if (std::isnan(expected)) {
        CHECK(std::isnan(H::ToFloat(out[i])));
      } else {
        INFO("op " << op << " index " << i << " a " << a[i] << " b " << b[i]);
        CHECK(out[i] == H::FromFloat(expected));
      }
    }
  }
}

TEST_CASE("integer and float kernels match the scalar reference", "[kernels]") {
  INFO("kernel set " << ReduceKernelSet());
  CheckIntegerOrFloat<int8_t>(DataType::kInt8);
  CheckIntegerOrFloat<int16_t>(DataType::kInt16);
  CheckIntegerOrFloat<uint16_t>(DataType::kUint16);
  CheckIntegerOrFloat<int32_t>(DataType::kInt32);
  CheckIntegerOrFloat<int64_t>(DataType::kInt64);
  CheckIntegerOrFloat<float>(DataType::kFloat32);
  CheckIntegerOrFloat<double>(DataType::kFloat64);
}

TEST_CASE("unsigned kernels wrap around", "[kernels]") {
  std::vector<uint8_t> a = {250, 255, 16};
  std::vector<uint8_t> b = {10, 2, 16};
  std::vector<uint8_t> out(3);
  ReduceBuffers(DataType::kUint8, ReduceOp::kSum, a.data(), b.data(), out.data(), 3);
  CHECK(out == std::vector<uint8_t>{4, 1, 32});
  ReduceBuffers(DataType::kUint8, ReduceOp::kProd, a.data(), b.data(), out.data(), 3);
  CHECK(out == std::vector<uint8_t>{196, 254, 0});
  std::vector<uint64_t> big = {~0ull};
  std::vector<uint64_t> one = {1};
  ReduceBuffers(DataType::kUint64, ReduceOp::kSum, big.data(), one.data(), big.data(), 1);
  CHECK(big[0] == 0);
  std::vector<uint32_t> x = {7, 9}, y = {9, 7}, z(2);
  ReduceBuffers(DataType::kUint32, ReduceOp::kMin, x.data(), y.data(), z.data(), 2);
  CHECK(z == std::vector<uint32_t>{7, 7});
}

TEST_CASE("float16 kernels round once, like the scalar conversion", "[kernels]") {
  CheckHalf<Float16>(DataType::kFloat16);
}

TEST_CASE("bfloat16 kernels round once, like the scalar conversion", "[kernels]") {
  CheckHalf<BFloat16>(DataType::kBFloat16);
}

TEST_CASE("average division truncates integers toward zero and rounds floats once", "[kernels]") {
  std::vector<int8_t> i8 = {-7, 7, 127, -128};
  DivideBuffer(DataType::kInt8, i8.data(), i8.size(), 2);
  CHECK(i8 == std::vector<int8_t>{-3, 3, 63, -64});
  std::vector<int8_t> wide = {100};
  DivideBuffer(DataType::kInt8, wide.data(), 1, 200);  // a divisor int8 cannot hold
  CHECK(wide[0] == 0);
  std::vector<float> f = {1.0f, -3.0f};
  DivideBuffer(DataType::kFloat32, f.data(), 2, 3);
  CHECK(f[0] == 1.0f / 3.0f);
  CHECK(f[1] == -1.0f);
  std::vector<uint16_t> h = {Float16(10.0f).bits};
  DivideBuffer(DataType::kFloat16, h.data(), 1, 3);
  CHECK(h[0] == Float16(10.0f / 3.0f).bits);
}

}  // namespace
}  // namespace chorus
