// A receive whose data lands in its final place and will not be read again soon (the last
// step of a collective whose output is larger than the last-level cache): where a transport
// hands the data over (RecvSink), it is copied with non-temporal stores, which write past the
// cache instead of first reading every destination line into it. That saves a third of the
// copy's memory traffic; the bytes would be evicted before the caller reads them anyway.
// Transports that store data themselves write it into the destination directly.
#ifndef CHORUS_COLLECTIVES_REDUCE_STREAMING_SINK_H_
#define CHORUS_COLLECTIVES_REDUCE_STREAMING_SINK_H_

#include <cstddef>
#include <cstdint>

#include "chorus/transport/transport.h"

namespace chorus {

// Copies `bytes` from `src` to `dst` with non-temporal stores (plain memcpy where the CPU has
// none); the stores are fenced before it returns, so a later release publishes them.
void StreamingCopy(void* dst, const void* src, size_t bytes);

// The size of this machine's last-level cache (CommunicatorOptions::streaming_bytes' default).
size_t LastLevelCacheBytes();

class StreamingSink final : public RecvSink {
 public:
  explicit StreamingSink(void* destination) : destination_(static_cast<uint8_t*>(destination)) {}
  void Consume(size_t offset, const void* data, size_t bytes) override {
    StreamingCopy(destination_ + offset, data, bytes);
  }
  bool CopiesOnly() const override { return true; }

 private:
  uint8_t* const destination_;
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_REDUCE_STREAMING_SINK_H_
