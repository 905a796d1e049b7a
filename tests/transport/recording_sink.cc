#include "tests/transport/recording_sink.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace chorus::testing {

RecordingSink::RecordingSink(size_t capacity) : data_(capacity), times_covered_(capacity) {}

void RecordingSink::Consume(size_t offset, const void* data, size_t bytes) {
  if (first_error_.empty()) {
    if (offset % kAlignment != 0) {
      first_error_ = absl::StrCat("a piece starts at ", offset, ", not a multiple of ", kAlignment);
    } else if (offset + bytes > data_.size()) {
      first_error_ = absl::StrCat("a piece [", offset, ", ", offset + bytes,
                                  ") reaches past the receive's ", data_.size(), " bytes");
    }
  }
  if (offset + bytes <= data_.size()) {
    if (bytes != 0) std::memcpy(data_.data() + offset, data, bytes);
    for (size_t i = offset; i < offset + bytes; ++i) ++times_covered_[i];
  }
  pieces_.fetch_add(1, std::memory_order_release);
}

absl::Status RecordingSink::Check(size_t message_bytes) const {
  if (!first_error_.empty()) return absl::InternalError(first_error_);
  for (size_t i = 0; i < times_covered_.size(); ++i) {
    const int expected = i < message_bytes ? 1 : 0;
    if (times_covered_[i] != expected) {
      return absl::InternalError(absl::StrCat("byte ", i, " was handed over ", times_covered_[i],
                                              " times, expected ", expected));
    }
  }
  return absl::OkStatus();
}

}  // namespace chorus::testing
