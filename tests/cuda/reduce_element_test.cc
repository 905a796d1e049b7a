// The element functions that the CUDA kernels run (core/reduce_element.h), compiled for the host,
// agree bit for bit with the host's vectorised kernels over every type and op, on random bit
// patterns (NaN, infinities and subnormals included for the float types).
#include "chorus/core/reduce_element.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

#include "chorus/collectives/reduce/reduce_kernels.h"
#include "chorus/core/types.h"

namespace chorus {
namespace {

constexpr size_t kCount = 4099;  // not a multiple of any vector width

// Bit for bit, except that two float16 NaNs are equal: the F16C kernels keep a NaN's payload
// bits, the scalar conversion does not.
bool SameElements(DataType type, const std::vector<uint8_t>& x, const std::vector<uint8_t>& y) {
  if (type != DataType::kFloat16) return x == y;
  auto is_nan = [](uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; };
  for (size_t i = 0; i + 1 < x.size(); i += 2) {
    uint16_t a, b;
    std::memcpy(&a, &x[i], 2);
    std::memcpy(&b, &y[i], 2);
    if (a != b && !(is_nan(a) && is_nan(b))) return false;
  }
  return true;
}

std::vector<uint8_t> RandomBytes(size_t bytes, uint32_t seed) {
  std::mt19937 generator(seed);
  std::vector<uint8_t> data(bytes);
  for (uint8_t& byte : data) byte = static_cast<uint8_t>(generator());
  return data;
}

TEST_CASE("element functions match the host kernels for every type and op", "[element]") {
  for (int t = 0; t < kNumDataTypes; ++t) {
    const DataType type = static_cast<DataType>(t);
    const size_t elem = DataTypeSize(type);
    const std::vector<uint8_t> a = RandomBytes(kCount * elem, 1 + t);
    const std::vector<uint8_t> b = RandomBytes(kCount * elem, 100 + t);
    for (int o = 0; o < kNumReduceOps; ++o) {
      const ReduceOp op = static_cast<ReduceOp>(o);
      std::vector<uint8_t> kernel(kCount * elem);
      ReduceBuffers(type, op, a.data(), b.data(), kernel.data(), kCount);
      std::vector<uint8_t> elements(kCount * elem);
      VisitDataType(type, [&](auto type_tag) {
        using T = typename decltype(type_tag)::type;
        using S = typename ElementCodec<T>::Storage;
        VisitReduceOp(op, [&](auto op_tag) {
          using Op = decltype(op_tag);
          for (size_t i = 0; i < kCount; ++i) {
            S x, y;
            std::memcpy(&x, a.data() + i * elem, elem);
            std::memcpy(&y, b.data() + i * elem, elem);
            const S z = CombineElement<T, Op>(x, y);
            std::memcpy(elements.data() + i * elem, &z, elem);
          }
        });
      });
      INFO(DataTypeName(type) << " " << ReduceOpName(op));
      CHECK(SameElements(type, kernel, elements));
    }
  }
}

TEST_CASE("DivideElement matches DivideBuffer for every type", "[element]") {
  for (int t = 0; t < kNumDataTypes; ++t) {
    const DataType type = static_cast<DataType>(t);
    const size_t elem = DataTypeSize(type);
    for (int divisor : {1, 3, 7, 200}) {
      std::vector<uint8_t> kernel = RandomBytes(kCount * elem, 7 + t);
      std::vector<uint8_t> elements = kernel;
      DivideBuffer(type, kernel.data(), kCount, divisor);
      VisitDataType(type, [&](auto type_tag) {
        using T = typename decltype(type_tag)::type;
        using S = typename ElementCodec<T>::Storage;
        for (size_t i = 0; i < kCount; ++i) {
          S x;
          std::memcpy(&x, elements.data() + i * elem, elem);
          x = DivideElement<T>(x, divisor);
          std::memcpy(elements.data() + i * elem, &x, elem);
        }
      });
      INFO(DataTypeName(type) << " / " << divisor);
      CHECK(SameElements(type, kernel, elements));
    }
  }
}

}  // namespace
}  // namespace chorus
