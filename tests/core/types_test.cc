#include "chorus/core/types.h"

#include <catch2/catch.hpp>

#include "chorus/core/env.h"

namespace chorus {
namespace {

TEST_CASE("data type sizes and names round-trip") {
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto type = static_cast<DataType>(i);
    auto parsed = ParseDataType(DataTypeName(type));
    REQUIRE(parsed.ok());
    CHECK(*parsed == type);
  }
  CHECK(DataTypeSize(DataType::kInt8) == 1);
  CHECK(DataTypeSize(DataType::kInt16) == 2);
  CHECK(DataTypeSize(DataType::kUint16) == 2);
  CHECK(*ParseDataType("int16") == DataType::kInt16);
  CHECK(*ParseDataType("ushort") == DataType::kUint16);
  CHECK(DataTypeSize(DataType::kFloat16) == 2);
  CHECK(DataTypeSize(DataType::kBFloat16) == 2);
  CHECK(DataTypeSize(DataType::kUint32) == 4);
  CHECK(DataTypeSize(DataType::kFloat64) == 8);
  CHECK(*ParseDataType("bf16") == DataType::kBFloat16);
  CHECK(*ParseDataType("FLOAT") == DataType::kFloat32);
  CHECK_FALSE(ParseDataType("complex64").ok());
}

TEST_CASE("reduce op names round-trip") {
  for (int i = 0; i < kNumReduceOps; ++i) {
    const auto op = static_cast<ReduceOp>(i);
    CHECK(*ParseReduceOp(ReduceOpName(op)) == op);
  }
  CHECK_FALSE(ParseReduceOp("xor").ok());
  CHECK(IsValidReduceOp(4));
  CHECK_FALSE(IsValidReduceOp(5));
  CHECK(IsValidDataType(11));
  CHECK_FALSE(IsValidDataType(12));
}

TEST_CASE("byte sizes parse with suffixes") {
  CHECK(*ParseBytes("4096") == 4096);
  CHECK(*ParseBytes("64k") == 64 * 1024);
  CHECK(*ParseBytes("4M") == 4 * 1024 * 1024);
  CHECK(*ParseBytes("1GB") == int64_t{1} << 30);
  CHECK(*ParseBytes("inf") == INT64_MAX);
  CHECK_FALSE(ParseBytes("-1").ok());
  CHECK_FALSE(ParseBytes("lots").ok());
}

}  // namespace
}  // namespace chorus
