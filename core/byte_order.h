// Little-endian integer stores and loads for the wire formats (the TCP transport's frames and
// handshake, the link authentication). Header-only, pure.
#ifndef CHORUS_CORE_BYTE_ORDER_H_
#define CHORUS_CORE_BYTE_ORDER_H_

#include <cstddef>
#include <cstdint>

namespace chorus {

template <typename T>
void StoreLittleEndian(uint8_t* out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}

template <typename T>
T LoadLittleEndian(const uint8_t* in) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(in[i]) << (8 * i);
  return value;
}

}  // namespace chorus

#endif  // CHORUS_CORE_BYTE_ORDER_H_
