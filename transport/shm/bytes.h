// A heap buffer that is not zero-filled first: messages that arrive before their receive (up to
// many MiB when pulled) are written over at once.
#ifndef CHORUS_TRANSPORT_SHM_BYTES_H_
#define CHORUS_TRANSPORT_SHM_BYTES_H_

#include <cstddef>
#include <cstring>
#include <memory>

namespace chorus::shm {

struct Bytes {
  std::unique_ptr<char[]> data;
  size_t size = 0;

  static Bytes Uninitialized(size_t size) {
    return Bytes{std::unique_ptr<char[]>(new char[size]), size};
  }
  static Bytes CopyOf(const char* from, size_t size) {
    Bytes bytes = Uninitialized(size);
    if (size != 0) std::memcpy(bytes.data.get(), from, size);
    return bytes;
  }
};

}  // namespace chorus::shm

#endif  // CHORUS_TRANSPORT_SHM_BYTES_H_
