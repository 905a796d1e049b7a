#include "chorus/core/byte_order.h"

#include <array>
#include <catch2/catch.hpp>
#include <cstdint>

namespace chorus {
namespace {

TEST_CASE("integers go on the wire least significant byte first") {
  std::array<uint8_t, 8> bytes{};
  StoreLittleEndian<uint64_t>(bytes.data(), 0x0807060504030201ull);
  CHECK(bytes == std::array<uint8_t, 8>{1, 2, 3, 4, 5, 6, 7, 8});
  StoreLittleEndian<uint32_t>(bytes.data(), 0xa1b2c3d4u);
  CHECK(bytes[0] == 0xd4);
  CHECK(bytes[1] == 0xc3);
  CHECK(bytes[2] == 0xb2);
  CHECK(bytes[3] == 0xa1);
  CHECK(bytes[4] == 5);  // untouched beyond the value
  StoreLittleEndian<uint16_t>(bytes.data() + 6, 0xbeef);
  CHECK(bytes[6] == 0xef);
  CHECK(bytes[7] == 0xbe);
}

TEST_CASE("loads read what stores wrote, from any offset") {
  std::array<uint8_t, 11> bytes{};
  StoreLittleEndian<uint64_t>(bytes.data() + 3, 0xfedcba9876543210ull);
  CHECK(LoadLittleEndian<uint64_t>(bytes.data() + 3) == 0xfedcba9876543210ull);
  const uint8_t wire[4] = {0x78, 0x56, 0x34, 0x12};
  CHECK(LoadLittleEndian<uint32_t>(wire) == 0x12345678u);
  CHECK(LoadLittleEndian<uint16_t>(wire + 1) == 0x3456);
}

}  // namespace
}  // namespace chorus
