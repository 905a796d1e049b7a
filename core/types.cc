#include "chorus/core/types.h"

#include <array>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace chorus {
namespace {

struct DataTypeInfo {
  absl::string_view name;
  size_t size;
};

constexpr std::array<DataTypeInfo, kNumDataTypes> kDataTypeInfo = {{
    {"int8", 1},
    {"uint8", 1},
    {"int32", 4},
    {"uint32", 4},
    {"int64", 8},
    {"uint64", 8},
    {"float16", 2},
    {"bfloat16", 2},
    {"float32", 4},
    {"float64", 8},
    {"int16", 2},
    {"uint16", 2},
}};

constexpr std::array<absl::string_view, kNumReduceOps> kReduceOpNames = {
    "sum", "prod", "min", "max", "avg"};

constexpr std::pair<absl::string_view, DataType> kDataTypeAliases[] = {
    {"half", DataType::kFloat16},    {"fp16", DataType::kFloat16},
    {"bf16", DataType::kBFloat16},   {"float", DataType::kFloat32},
    {"fp32", DataType::kFloat32},    {"double", DataType::kFloat64},
    {"fp64", DataType::kFloat64},    {"int", DataType::kInt32},
    {"uint", DataType::kUint32},     {"char", DataType::kInt8},
    {"short", DataType::kInt16},     {"ushort", DataType::kUint16},
};

}  // namespace

size_t DataTypeSize(DataType type) {
  return kDataTypeInfo[static_cast<size_t>(type)].size;
}

absl::string_view DataTypeName(DataType type) {
  return kDataTypeInfo[static_cast<size_t>(type)].name;
}

absl::string_view ReduceOpName(ReduceOp op) {
  return kReduceOpNames[static_cast<size_t>(op)];
}

absl::StatusOr<DataType> ParseDataType(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (int i = 0; i < kNumDataTypes; ++i) {
    if (kDataTypeInfo[i].name == lower) return static_cast<DataType>(i);
  }
  for (const auto& [alias, type] : kDataTypeAliases) {
    if (alias == lower) return type;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown data type '", name,
      "'; expected one of int8 uint8 int16 uint16 int32 uint32 int64 uint64 float16 bfloat16 "
      "float32 float64"));
}

absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (int i = 0; i < kNumReduceOps; ++i) {
    if (kReduceOpNames[i] == lower) return static_cast<ReduceOp>(i);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown reduce op '", name, "'; expected one of sum prod min max avg"));
}

bool IsValidDataType(uint8_t value) { return value < kNumDataTypes; }
bool IsValidReduceOp(uint8_t value) { return value < kNumReduceOps; }

}  // namespace chorus
