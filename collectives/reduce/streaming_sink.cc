#include "chorus/collectives/reduce/streaming_sink.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace chorus {

void StreamingCopy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;  // empty buffers may be null, which memcpy must never be given
#if defined(__SSE2__)
  auto* to = static_cast<uint8_t*>(dst);
  const auto* from = static_cast<const uint8_t*>(src);
  // Non-temporal stores need 16-byte aligned destinations: copy up to the first boundary.
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(to) % 16) % 16);
  std::memcpy(to, from, head);
  size_t done = head;
  for (; done + 64 <= bytes; done += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + done));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + done + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + done + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + done + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + done), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + done + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + done + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + done + 48), d);
  }
  std::memcpy(to + done, from + done, bytes - done);
  _mm_sfence();
#else
  std::memcpy(dst, src, bytes);
#endif
}

size_t LastLevelCacheBytes() {
  static const size_t kCacheBytes = [] {
    // sysfs first: on virtual machines sysconf can report the host's whole cache (320 MiB
    // where sysfs and lscpu say 32 here). The highest-level cache listed is the last one.
    // 32 MiB where neither tells.
    int best_level = 0;
    size_t best_bytes = 0;
    for (int index = 0; index < 8; ++index) {
      const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
      int level = 0;
      unsigned long kib = 0;
      if (std::FILE* file = std::fopen((dir + "/level").c_str(), "r")) {
        if (std::fscanf(file, "%d", &level) != 1) level = 0;
        std::fclose(file);
      }
      if (std::FILE* file = std::fopen((dir + "/size").c_str(), "r")) {
        if (std::fscanf(file, "%luK", &kib) != 1) kib = 0;
        std::fclose(file);
      }
      if (level > best_level && kib > 0) {
        best_level = level;
        best_bytes = static_cast<size_t>(kib) << 10;
      }
    }
    if (best_bytes > 0) return best_bytes;
    const long reported = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return reported > 0 ? static_cast<size_t>(reported) : size_t{32} << 20;
  }();
  return kCacheBytes;
}

}  // namespace chorus
