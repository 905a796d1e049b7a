// The element types and reduction operators, as bare enums: what device code (CUDA kernels)
// includes, so it needs nothing else. core/types.h adds names, sizes and parsing.
#ifndef CHORUS_CORE_DATA_TYPE_H_
#define CHORUS_CORE_DATA_TYPE_H_

#include <cstdint>

namespace chorus {

// Element types. The numeric values are part of the wire format (collective headers carry them), so
// never reorder; append new types at the end.
enum class DataType : uint8_t {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,   // IEEE 754 binary16
  kBFloat16 = 7,  // bfloat16 (the top 16 bits of a binary32)
  kFloat32 = 8,
  kFloat64 = 9,
  kInt16 = 10,
  kUint16 = 11,
};
inline constexpr int kNumDataTypes = 12;

// Reduction operators. kAvg is a sum followed by a division by the rank count; for integer types
// the division truncates toward zero (C++ integer division). Numeric values are part of the wire
// format.
enum class ReduceOp : uint8_t {
  kSum = 0,
  kProd = 1,
  kMin = 2,
  kMax = 3,
  kAvg = 4,
};
inline constexpr int kNumReduceOps = 5;

}  // namespace chorus

#endif  // CHORUS_CORE_DATA_TYPE_H_
