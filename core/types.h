// Element types and reduction operators that every collective understands.
#ifndef CHORUS_CORE_TYPES_H_
#define CHORUS_CORE_TYPES_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace chorus {

// Element types. The numeric values are part of the wire format (collective headers carry
// them), so never reorder; append new types at the end.
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

// Reduction operators. kAvg is a sum followed by a division by the rank count; for integer
// types the division truncates toward zero (C++ integer division). Numeric values are part of
// the wire format.
enum class ReduceOp : uint8_t {
  kSum = 0,
  kProd = 1,
  kMin = 2,
  kMax = 3,
  kAvg = 4,
};
inline constexpr int kNumReduceOps = 5;

// Bytes per element.
size_t DataTypeSize(DataType type);

// Short lowercase names as used in flags, logs and benchmark tables: "int8", "uint8", "int32",
// "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64", "int16", "uint16";
// "sum", "prod", "min", "max", "avg".
absl::string_view DataTypeName(DataType type);
absl::string_view ReduceOpName(ReduceOp op);

// Parses the names above (also accepting the aliases "half"/"fp16", "bf16", "float"/"fp32",
// "double"/"fp64", "int"/"uint", "short"/"ushort"). Unknown names give InvalidArgument.
absl::StatusOr<DataType> ParseDataType(absl::string_view name);
absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);

// True for the values that fit in the enums; used to validate bytes read from the wire.
bool IsValidDataType(uint8_t value);
bool IsValidReduceOp(uint8_t value);

}  // namespace chorus

#endif  // CHORUS_CORE_TYPES_H_
