// Little-endian integer stores and loads for the wire formats (the TCP transport's frames and
// handshake, the link authentication). Header-only, pure.
#ifndef CHORUS_CORE_BYTE_ORDER_H_
#define CHORUS_CORE_BYTE_ORDER_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace chorus {

// A little-endian host stores and loads the bytes as they are: one move, where the byte loop
// (which the compiler does not always merge) cost a TCP frame header about 300 instructions.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
inline constexpr bool kLittleEndianHost = true;
#else
inline constexpr bool kLittleEndianHost = false;
#endif

template <typename T>
void StoreLittleEndian(uint8_t* out, T value) {
  if constexpr (kLittleEndianHost) {
    std::memcpy(out, &value, sizeof(T));
  } else {
    for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
  }
}

template <typename T>
T LoadLittleEndian(const uint8_t* in) {
  T value = 0;
  if constexpr (kLittleEndianHost) {
    std::memcpy(&value, in, sizeof(T));
  } else {
    for (size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(in[i]) << (8 * i);
  }
  return value;
}

}  // namespace chorus

#endif  // CHORUS_CORE_BYTE_ORDER_H_
