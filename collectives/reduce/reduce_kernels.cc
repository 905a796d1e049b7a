// The loops below are written so that GCC vectorises them (this file is compiled with the
// dynamic vectoriser cost model, see BUILD); `objdump -d` shows packed instructions in the hot
// loops (docs/collectives.md lists what to look for). The same loops are instantiated twice:
// once for the baseline ISA and once inside a target("avx2,f16c") function, and the right set
// is picked once at run time.
#include "chorus/collectives/reduce/reduce_kernels.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "chorus/core/half.h"
#include "chorus/core/reduce_element.h"

#define CHORUS_ALWAYS_INLINE inline __attribute__((always_inline))

namespace chorus {
namespace {

// The scalar operators of core/reduce_element.h, each with its eight-float AVX2 form.
struct SumOp : SumScalar {
  static __attribute__((target("avx2"))) CHORUS_ALWAYS_INLINE __m256 Apply8(__m256 a, __m256 b) {
    return _mm256_add_ps(a, b);
  }
};

struct ProdOp : ProdScalar {
  static __attribute__((target("avx2"))) CHORUS_ALWAYS_INLINE __m256 Apply8(__m256 a, __m256 b) {
    return _mm256_mul_ps(a, b);
  }
};

// `a < b ? a : b` is exactly minps(a, b), NaN included, so scalar tails and vector bodies agree.
struct MinOp : MinScalar {
  static __attribute__((target("avx2"))) CHORUS_ALWAYS_INLINE __m256 Apply8(__m256 a, __m256 b) {
    return _mm256_min_ps(a, b);
  }
};

struct MaxOp : MaxScalar {
  static __attribute__((target("avx2"))) CHORUS_ALWAYS_INLINE __m256 Apply8(__m256 a, __m256 b) {
    return _mm256_max_ps(a, b);
  }
};

template <typename T, typename Op>
CHORUS_ALWAYS_INLINE void Combine(const void* a_bytes, const void* b_bytes, void* dst_bytes,
                                  size_t n) {
  const T* a = static_cast<const T*>(a_bytes);
  const T* b = static_cast<const T*>(b_bytes);
  T* dst = static_cast<T*>(dst_bytes);
  for (size_t i = 0; i < n; ++i) dst[i] = Op::template Apply<T>(a[i], b[i]);
}

// bfloat16 <-> float without branches, so the loop vectorises: widening is a shift; narrowing
// adds the round-to-nearest-even bias, and NaNs keep a quiet bit instead of rounding to inf.
CHORUS_ALWAYS_INLINE float Bf16ToFloat(uint16_t h) {
  const uint32_t f = static_cast<uint32_t>(h) << 16;
  float out;
  std::memcpy(&out, &f, sizeof(out));
  return out;
}

CHORUS_ALWAYS_INLINE uint16_t FloatToBf16(float value) {
  uint32_t f;
  std::memcpy(&f, &value, sizeof(f));
  const uint32_t rounded = (f + 0x7fffu + ((f >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (f >> 16) | 0x40u;
  return static_cast<uint16_t>((f & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

template <typename Op>
CHORUS_ALWAYS_INLINE void CombineBFloat16(const void* a_bytes, const void* b_bytes, void* dst_bytes,
                                          size_t n) {
  const uint16_t* a = static_cast<const uint16_t*>(a_bytes);
  const uint16_t* b = static_cast<const uint16_t*>(b_bytes);
  uint16_t* dst = static_cast<uint16_t*>(dst_bytes);
  for (size_t i = 0; i < n; ++i) {
    dst[i] = FloatToBf16(Op::template Apply<float>(Bf16ToFloat(a[i]), Bf16ToFloat(b[i])));
  }
}

// float16 through the exact scalar conversions of core/half.h (baseline CPUs lack F16C).
template <typename Op>
CHORUS_ALWAYS_INLINE void CombineFloat16Scalar(const void* a_bytes, const void* b_bytes,
                                               void* dst_bytes, size_t n) {
  const uint16_t* a = static_cast<const uint16_t*>(a_bytes);
  const uint16_t* b = static_cast<const uint16_t*>(b_bytes);
  uint16_t* dst = static_cast<uint16_t*>(dst_bytes);
  for (size_t i = 0; i < n; ++i) dst[i] = CombineElement<Float16, Op>(a[i], b[i]);
}

// float16 with F16C: eight halves widened per instruction, combined in float, rounded once.
template <typename Op>
__attribute__((target("avx2,f16c"))) void CombineFloat16F16c(const void* a_bytes,
                                                             const void* b_bytes, void* dst_bytes,
                                                             size_t n) {
  const uint16_t* a = static_cast<const uint16_t*>(a_bytes);
  const uint16_t* b = static_cast<const uint16_t*>(b_bytes);
  uint16_t* dst = static_cast<uint16_t*>(dst_bytes);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    const __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(Op::Apply8(x, y), _MM_FROUND_TO_NEAREST_INT));
  }
  CombineFloat16Scalar<Op>(a + i, b + i, dst + i, n - i);
}

template <typename Op, bool kF16c>
CHORUS_ALWAYS_INLINE void CombineTyped(DataType type, const void* a, const void* b, void* dst,
                                       size_t n) {
  switch (type) {
    case DataType::kInt8:
      return Combine<int8_t, Op>(a, b, dst, n);
    case DataType::kUint8:
      return Combine<uint8_t, Op>(a, b, dst, n);
    case DataType::kInt16:
      return Combine<int16_t, Op>(a, b, dst, n);
    case DataType::kUint16:
      return Combine<uint16_t, Op>(a, b, dst, n);
    case DataType::kInt32:
      return Combine<int32_t, Op>(a, b, dst, n);
    case DataType::kUint32:
      return Combine<uint32_t, Op>(a, b, dst, n);
    case DataType::kInt64:
      return Combine<int64_t, Op>(a, b, dst, n);
    case DataType::kUint64:
      return Combine<uint64_t, Op>(a, b, dst, n);
    case DataType::kFloat16:
      if constexpr (kF16c) {
        return CombineFloat16F16c<Op>(a, b, dst, n);
      } else {
        return CombineFloat16Scalar<Op>(a, b, dst, n);
      }
    case DataType::kBFloat16:
      return CombineBFloat16<Op>(a, b, dst, n);
    case DataType::kFloat32:
      return Combine<float, Op>(a, b, dst, n);
    case DataType::kFloat64:
      return Combine<double, Op>(a, b, dst, n);
  }
}

template <bool kF16c>
CHORUS_ALWAYS_INLINE void CombineAny(DataType type, ReduceOp op, const void* a, const void* b,
                                     void* dst, size_t n) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return CombineTyped<SumOp, kF16c>(type, a, b, dst, n);
    case ReduceOp::kProd:
      return CombineTyped<ProdOp, kF16c>(type, a, b, dst, n);
    case ReduceOp::kMin:
      return CombineTyped<MinOp, kF16c>(type, a, b, dst, n);
    case ReduceOp::kMax:
      return CombineTyped<MaxOp, kF16c>(type, a, b, dst, n);
  }
}

void ReduceBaseline(DataType type, ReduceOp op, const void* a, const void* b, void* dst, size_t n) {
  CombineAny<false>(type, op, a, b, dst, n);
}

__attribute__((target("avx2,f16c"))) void ReduceAvx2(DataType type, ReduceOp op, const void* a,
                                                     const void* b, void* dst, size_t n) {
  CombineAny<true>(type, op, a, b, dst, n);
}

using ReduceFn = void (*)(DataType, ReduceOp, const void*, const void*, void*, size_t);

bool HasAvx2F16c() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return has;
}

// DivideElement divides integers in a type wide enough for any divisor (an int8 average over
// 200 ranks divides by 200, which int8 cannot hold).
template <typename T>
void DivideTyped(void* data, size_t n, int divisor) {
  auto* values = static_cast<typename ElementCodec<T>::Storage*>(data);
  for (size_t i = 0; i < n; ++i) values[i] = DivideElement<T>(values[i], divisor);
}

}  // namespace

void ReduceBuffers(DataType type, ReduceOp op, const void* a, const void* b, void* dst,
                   size_t count) {
  static const ReduceFn kernel = HasAvx2F16c() ? ReduceAvx2 : ReduceBaseline;
  kernel(type, op, a, b, dst, count);
}

void DivideBuffer(DataType type, void* data, size_t count, int divisor) {
  switch (type) {
    case DataType::kInt8:
      return DivideTyped<int8_t>(data, count, divisor);
    case DataType::kUint8:
      return DivideTyped<uint8_t>(data, count, divisor);
    case DataType::kInt16:
      return DivideTyped<int16_t>(data, count, divisor);
    case DataType::kUint16:
      return DivideTyped<uint16_t>(data, count, divisor);
    case DataType::kInt32:
      return DivideTyped<int32_t>(data, count, divisor);
    case DataType::kUint32:
      return DivideTyped<uint32_t>(data, count, divisor);
    case DataType::kInt64:
      return DivideTyped<int64_t>(data, count, divisor);
    case DataType::kUint64:
      return DivideTyped<uint64_t>(data, count, divisor);
    case DataType::kFloat16:
      return DivideTyped<Float16>(data, count, divisor);
    case DataType::kBFloat16:
      return DivideTyped<BFloat16>(data, count, divisor);
    case DataType::kFloat32:
      return DivideTyped<float>(data, count, divisor);
    case DataType::kFloat64:
      return DivideTyped<double>(data, count, divisor);
  }
}

absl::string_view ReduceKernelSet() { return HasAvx2F16c() ? "avx2+f16c" : "baseline"; }

}  // namespace chorus
