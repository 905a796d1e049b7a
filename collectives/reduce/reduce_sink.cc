#include "chorus/collectives/reduce/reduce_sink.h"

#include "chorus/collectives/reduce/reduce_kernels.h"

namespace chorus {

ReduceSink::ReduceSink(DataType type, ReduceOp op, const void* own, void* out, void* buffer,
                       size_t bytes)
    : type_(type),
      op_(op),
      own_(static_cast<const uint8_t*>(own)),
      out_(static_cast<uint8_t*>(out)),
      buffer_(buffer),
      bytes_(bytes) {}

void ReduceSink::Consume(size_t offset, const void* data, size_t bytes) {
  // Pieces arrive within the posted length (longer messages fail before any byte is handed
  // over) and never split an element (RecvSink::kAlignment is a multiple of every size).
  const size_t elem = DataTypeSize(type_);
  ReduceBuffers(type_, op_, data, own_ + offset, out_ + offset, bytes / elem);
  consumed_ += bytes;
}

void ReduceSink::Finish() {
  if (finished_) return;
  finished_ = true;
  if (consumed_ != 0 || bytes_ == 0) return;  // handed over piece by piece: already reduced
  ReduceBuffers(type_, op_, buffer_, own_, out_, bytes_ / DataTypeSize(type_));
}

}  // namespace chorus
