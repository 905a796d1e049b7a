// Element types and reduction operators that every collective understands.
#ifndef CHORUS_CORE_TYPES_H_
#define CHORUS_CORE_TYPES_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chorus/core/data_type.h"

namespace chorus {

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
