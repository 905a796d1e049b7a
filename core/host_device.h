// CHORUS_HOST_DEVICE marks functions that both the host compiler and nvcc compile, for the CPU and
// for the GPU (the element conversions and reduction operators): one definition, so the two sides
// cannot disagree on a rounding or a NaN.
#ifndef CHORUS_CORE_HOST_DEVICE_H_
#define CHORUS_CORE_HOST_DEVICE_H_

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define CHORUS_HOST_DEVICE __host__ __device__
#else
#define CHORUS_HOST_DEVICE
#endif

namespace chorus {

// The bits of a float and back, in host and device code alike.
CHORUS_HOST_DEVICE inline uint32_t FloatBits(float value) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
#endif
}

CHORUS_HOST_DEVICE inline float FloatFromBits(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
#endif
}

}  // namespace chorus

#endif  // CHORUS_CORE_HOST_DEVICE_H_
