// 16-bit floating-point storage types. Arithmetic happens in float: load converts to float in
// registers, store rounds once (round to nearest, ties to even), as the reduction kernels need.
#ifndef CHORUS_CORE_HALF_H_
#define CHORUS_CORE_HALF_H_

#include <cstdint>

#include "chorus/core/host_device.h"

namespace chorus {

// IEEE 754 binary16.
struct Float16 {
  uint16_t bits = 0;

  Float16() = default;
  static Float16 FromBits(uint16_t b) {
    Float16 h;
    h.bits = b;
    return h;
  }
  explicit Float16(float value) : bits(FromFloat(value)) {}
  explicit operator float() const { return ToFloat(bits); }

  CHORUS_HOST_DEVICE static float ToFloat(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    uint32_t f;
    if (exponent == 0x1f) {  // inf or NaN
      f = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent != 0) {  // normal
      f = sign | ((exponent + 112) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {  // zero
      f = sign;
    } else {  // subnormal: renormalise
      exponent = 113;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      f = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
    }
    return FloatFromBits(f);
  }

  CHORUS_HOST_DEVICE static uint16_t FromFloat(float value) {
    const uint32_t f = FloatBits(value);
    const uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
    const uint32_t abs = f & 0x7fffffffu;
    if (abs >= 0x7f800000u) {  // inf or NaN (keep NaN quiet and non-zero)
      return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);
    }
    if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow to inf
    if (abs < 0x38800000u) {                        // below the smallest normal: subnormal
      if (abs < 0x33000000u) return sign;           // rounds to zero
      const uint32_t exponent = abs >> 23;
      const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
      const uint32_t shift = 126 - exponent;  // 14..24
      uint32_t half = mantissa >> shift;
      const uint32_t rest = mantissa & ((1u << shift) - 1);
      const uint32_t halfway = 1u << (shift - 1);
      if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
      return sign | static_cast<uint16_t>(half);
    }
    // Normal: rebias the exponent and round the mantissa from 23 to 10 bits.
    uint32_t half = ((abs - 0x38000000u) >> 13);
    const uint32_t rest = abs & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
};

// bfloat16: the upper half of a binary32.
struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  static BFloat16 FromBits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
  explicit BFloat16(float value) : bits(FromFloat(value)) {}
  explicit operator float() const { return ToFloat(bits); }

  CHORUS_HOST_DEVICE static float ToFloat(uint16_t h) {
    return FloatFromBits(static_cast<uint32_t>(h) << 16);
  }

  CHORUS_HOST_DEVICE static uint16_t FromFloat(float value) {
    const uint32_t f = FloatBits(value);
    if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);  // NaN
    const uint32_t rounding = 0x7fffu + ((f >> 16) & 1u);  // round to nearest, ties to even
    return static_cast<uint16_t>((f + rounding) >> 16);
  }
};

static_assert(sizeof(Float16) == 2, "Float16 must be 2 bytes");
static_assert(sizeof(BFloat16) == 2, "BFloat16 must be 2 bytes");

}  // namespace chorus

#endif  // CHORUS_CORE_HALF_H_
