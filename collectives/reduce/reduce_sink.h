// A receive whose data is combined into an output as it arrives, so that on transports that
// hand data over (shared memory in place, TCP a socket read at a time from a buffer that stays
// in cache) the reduction reads straight from the transport's memory and the copy into a
// receive buffer disappears; elsewhere the data lands in a buffer first and is reduced from
// there once the receive is done.
#ifndef CHORUS_COLLECTIVES_REDUCE_REDUCE_SINK_H_
#define CHORUS_COLLECTIVES_REDUCE_REDUCE_SINK_H_

#include <cstddef>
#include <cstdint>

#include "chorus/core/types.h"
#include "chorus/transport/transport.h"

namespace chorus {

// out[i] = received[i] op own[i] for the `bytes` of one message (operands in that order, as
// the algorithms' determinism needs). `out` may be exactly `own`.
class ReduceSink final : public RecvSink {
 public:
  ReduceSink(DataType type, ReduceOp op, const void* own, void* out, void* buffer, size_t bytes);

  // Called by the transport, for pieces of the message as they arrive.
  void Consume(size_t offset, const void* data, size_t bytes) override;

  // Once the receive is done: reduces from `buffer` what the transport stored there instead
  // of handing it over. Idempotent.
  void Finish();

 private:
  const DataType type_;
  const ReduceOp op_;
  const uint8_t* const own_;
  uint8_t* const out_;
  void* const buffer_;
  const size_t bytes_;
  size_t consumed_ = 0;  // bytes handed over by the transport
  bool finished_ = false;
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_REDUCE_REDUCE_SINK_H_
