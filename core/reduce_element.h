// One element of a reduction, defined once for the CPU and the GPU: the operators, the integer
// wrap-around, and how float16 and bfloat16 widen to float and round back. The host kernels
// (collectives/reduce/reduce_kernels.cc) vectorise these operators; the CUDA kernels
// (cuda/reduce_kernels.cu) run them per element. Pure functions; thread-safe.
//
// Integer sum and prod wrap around (two's complement); min and max return the second operand when
// either is NaN (`a < b ? a : b`, which is exactly x86's minps).
#ifndef CHORUS_CORE_REDUCE_ELEMENT_H_
#define CHORUS_CORE_REDUCE_ELEMENT_H_

#include <cstdint>
#include <type_traits>

#include "chorus/core/data_type.h"
#include "chorus/core/half.h"
#include "chorus/core/host_device.h"

#ifdef __CUDACC__
#include <cuda_fp16.h>
#endif

namespace chorus {

// Integer arithmetic goes through the unsigned type so overflow wraps instead of being undefined
// behaviour.
template <typename T, bool kIntegral = std::is_integral<T>::value>
struct ArithOf {
  using type = T;
};
template <typename T>
struct ArithOf<T, true> {
  using type = typename std::make_unsigned<T>::type;
};
template <typename T>
using Arith = typename ArithOf<T>::type;

struct SumScalar {
  template <typename T>
  CHORUS_HOST_DEVICE static T Apply(T a, T b) {
    return static_cast<T>(static_cast<Arith<T>>(a) + static_cast<Arith<T>>(b));
  }
};

struct ProdScalar {
  template <typename T>
  CHORUS_HOST_DEVICE static T Apply(T a, T b) {
    return static_cast<T>(static_cast<Arith<T>>(a) * static_cast<Arith<T>>(b));
  }
};

struct MinScalar {
  template <typename T>
  CHORUS_HOST_DEVICE static T Apply(T a, T b) {
    return a < b ? a : b;
  }
};

struct MaxScalar {
  template <typename T>
  CHORUS_HOST_DEVICE static T Apply(T a, T b) {
    return a > b ? a : b;
  }
};

// How a stored element becomes a value to compute with and back: the identity for the native types;
// float for the 16-bit floats, rounded once on store.
template <typename T>
struct ElementCodec {
  using Storage = T;
  using Compute = T;
  CHORUS_HOST_DEVICE static Compute Load(Storage s) { return s; }
  CHORUS_HOST_DEVICE static Storage Store(Compute c) { return c; }
};
// On a GPU float16 converts in hardware, which rounds as core/half.h does (to nearest, ties to
// even); only the bits of a NaN may differ.
template <>
struct ElementCodec<Float16> {
  using Storage = uint16_t;
  using Compute = float;
  CHORUS_HOST_DEVICE static float Load(uint16_t s) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(s));
#else
    return Float16::ToFloat(s);
#endif
  }
  CHORUS_HOST_DEVICE static uint16_t Store(float c) {
#ifdef __CUDA_ARCH__
    return __half_as_ushort(__float2half_rn(c));
#else
    return Float16::FromFloat(c);
#endif
  }
};
template <>
struct ElementCodec<BFloat16> {
  using Storage = uint16_t;
  using Compute = float;
  CHORUS_HOST_DEVICE static float Load(uint16_t s) { return BFloat16::ToFloat(s); }
  CHORUS_HOST_DEVICE static uint16_t Store(float c) { return BFloat16::FromFloat(c); }
};

// a op b for one element of type T (Float16 and BFloat16 name the 16-bit floats).
template <typename T, typename Op>
CHORUS_HOST_DEVICE inline typename ElementCodec<T>::Storage CombineElement(
    typename ElementCodec<T>::Storage a, typename ElementCodec<T>::Storage b) {
  using Codec = ElementCodec<T>;
  return Codec::Store(Op::Apply(Codec::Load(a), Codec::Load(b)));
}

// value / divisor as ReduceOp::kAvg ends: integers in a type wide enough for any divisor,
// truncating toward zero; floats rounded once.
template <typename T>
CHORUS_HOST_DEVICE inline typename ElementCodec<T>::Storage DivideElement(
    typename ElementCodec<T>::Storage value, int divisor) {
  using Codec = ElementCodec<T>;
  using Compute = typename Codec::Compute;
  using Wide = typename std::conditional<
      std::is_floating_point<Compute>::value, Compute,
      typename std::conditional<std::is_signed<Compute>::value, int64_t, uint64_t>::type>::type;
  return Codec::Store(
      static_cast<Compute>(static_cast<Wide>(Codec::Load(value)) / static_cast<Wide>(divisor)));
}

// Calls f(TypeTag<T>{}) with T the element type of `type` (Float16 / BFloat16 for the 16-bit
// floats): how a switch over types instantiates a template per type.
template <typename T>
struct TypeTag {
  using type = T;
};
template <typename F>
inline void VisitDataType(DataType type, F&& f) {
  switch (type) {
    case DataType::kInt8:
      return f(TypeTag<int8_t>{});
    case DataType::kUint8:
      return f(TypeTag<uint8_t>{});
    case DataType::kInt16:
      return f(TypeTag<int16_t>{});
    case DataType::kUint16:
      return f(TypeTag<uint16_t>{});
    case DataType::kInt32:
      return f(TypeTag<int32_t>{});
    case DataType::kUint32:
      return f(TypeTag<uint32_t>{});
    case DataType::kInt64:
      return f(TypeTag<int64_t>{});
    case DataType::kUint64:
      return f(TypeTag<uint64_t>{});
    case DataType::kFloat16:
      return f(TypeTag<Float16>{});
    case DataType::kBFloat16:
      return f(TypeTag<BFloat16>{});
    case DataType::kFloat32:
      return f(TypeTag<float>{});
    case DataType::kFloat64:
      return f(TypeTag<double>{});
  }
}

// f(Op{}) with Op the scalar operator of `op` (kAvg combines like kSum).
template <typename F>
inline void VisitReduceOp(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return f(SumScalar{});
    case ReduceOp::kProd:
      return f(ProdScalar{});
    case ReduceOp::kMin:
      return f(MinScalar{});
    case ReduceOp::kMax:
      return f(MaxScalar{});
  }
}

}  // namespace chorus

#endif  // CHORUS_CORE_REDUCE_ELEMENT_H_
