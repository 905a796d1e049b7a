// Element types and reduction operators of the C++ API (the same values as chorus_c.h's).
#ifndef CHORUS_TYPES_H_
#define CHORUS_TYPES_H_

#include <cstddef>
#include <cstdint>

#include "chorus/chorus_c.h"

namespace chorus {
inline namespace v0 {

enum class DataType : int {
  kInt8 = CHORUS_INT8,
  kUint8 = CHORUS_UINT8,
  kInt32 = CHORUS_INT32,
  kUint32 = CHORUS_UINT32,
  kInt64 = CHORUS_INT64,
  kUint64 = CHORUS_UINT64,
  kFloat16 = CHORUS_FLOAT16,    // IEEE 754 binary16 (pass its 16-bit storage)
  kBFloat16 = CHORUS_BFLOAT16,  // the top 16 bits of a binary32
  kFloat32 = CHORUS_FLOAT32,
  kFloat64 = CHORUS_FLOAT64,
  kInt16 = CHORUS_INT16,
  kUint16 = CHORUS_UINT16,
};

// kAvg sums, then divides by the rank count (integers truncate toward zero).
enum class ReduceOp : int {
  kSum = CHORUS_SUM,
  kProd = CHORUS_PROD,
  kMin = CHORUS_MIN,
  kMax = CHORUS_MAX,
  kAvg = CHORUS_AVG,
};

// Where a call's buffers live (CallOptions::memory).
enum class MemoryType : int {
  kAuto = CHORUS_MEMORY_AUTO,  // asked of the CUDA runtime when there is one, else host
  kHost = CHORUS_MEMORY_HOST,
  kCuda = CHORUS_MEMORY_CUDA,  // CUDA device memory
};

// Bytes per element.
inline size_t DataTypeSize(DataType type) {
  return chorus_datatype_size(static_cast<chorus_datatype_t>(type));
}

// The DataType of a C++ element type: DataTypeOf<float>() == DataType::kFloat32. (float16 and
// bfloat16 have no standard C++ type; name them directly.)
template <typename T>
constexpr DataType DataTypeOf();
template <>
constexpr DataType DataTypeOf<int8_t>() {
  return DataType::kInt8;
}
template <>
constexpr DataType DataTypeOf<uint8_t>() {
  return DataType::kUint8;
}
template <>
constexpr DataType DataTypeOf<int16_t>() {
  return DataType::kInt16;
}
template <>
constexpr DataType DataTypeOf<uint16_t>() {
  return DataType::kUint16;
}
template <>
constexpr DataType DataTypeOf<int32_t>() {
  return DataType::kInt32;
}
template <>
constexpr DataType DataTypeOf<uint32_t>() {
  return DataType::kUint32;
}
template <>
constexpr DataType DataTypeOf<int64_t>() {
  return DataType::kInt64;
}
template <>
constexpr DataType DataTypeOf<uint64_t>() {
  return DataType::kUint64;
}
template <>
constexpr DataType DataTypeOf<float>() {
  return DataType::kFloat32;
}
template <>
constexpr DataType DataTypeOf<double>() {
  return DataType::kFloat64;
}

}  // namespace v0
}  // namespace chorus

#endif  // CHORUS_TYPES_H_
