#include "chorus/core/half.h"

#include <cmath>
#include <limits>

#include <catch2/catch.hpp>

namespace chorus {
namespace {

TEST_CASE("float16 converts exactly representable values both ways") {
  for (int i = -2048; i <= 2048; ++i) {  // every integer up to 2^11 is exact in binary16
    const float f = static_cast<float>(i);
    CHECK(static_cast<float>(Float16(f)) == f);
  }
  CHECK(Float16(1.0f).bits == 0x3c00);
  CHECK(Float16(-2.0f).bits == 0xc000);
  CHECK(Float16(65504.0f).bits == 0x7bff);
  CHECK(Float16(65520.0f).bits == 0x7c00);  // rounds to infinity
  CHECK(Float16(std::ldexp(1.0f, -24)).bits == 0x0001);  // smallest subnormal
  CHECK(Float16::ToFloat(0x0001) == std::ldexp(1.0f, -24));
  CHECK(Float16(std::ldexp(1.0f, -25)).bits == 0x0000);  // tie rounds to even (zero)
  CHECK(std::isnan(Float16::ToFloat(Float16(std::numeric_limits<float>::quiet_NaN()).bits)));
}

TEST_CASE("float16 rounds to nearest even") {
  // 2049 lies halfway between 2048 and 2050: ties to even mantissa (2048).
  CHECK(static_cast<float>(Float16(2049.0f)) == 2048.0f);
  CHECK(static_cast<float>(Float16(2051.0f)) == 2052.0f);
  CHECK(static_cast<float>(Float16(2050.5f)) == 2050.0f);
}

TEST_CASE("bfloat16 converts and rounds to nearest even") {
  for (int i = -256; i <= 256; ++i) {
    const float f = static_cast<float>(i);
    CHECK(static_cast<float>(BFloat16(f)) == f);
  }
  CHECK(BFloat16(1.0f).bits == 0x3f80);
  CHECK(static_cast<float>(BFloat16(257.0f)) == 256.0f);  // tie to even
  CHECK(static_cast<float>(BFloat16(259.0f)) == 260.0f);
  CHECK(std::isnan(BFloat16::ToFloat(BFloat16(std::numeric_limits<float>::quiet_NaN()).bits)));
}

}  // namespace
}  // namespace chorus
