// A RecvSink for tests: keeps what it is handed in its own buffer and checks the RecvSink
// contract (aligned pieces, within the message, none overlapping, the whole message once).
#ifndef CHORUS_TESTS_TRANSPORT_RECORDING_SINK_H_
#define CHORUS_TESTS_TRANSPORT_RECORDING_SINK_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "chorus/transport/transport.h"

namespace chorus::testing {

class RecordingSink final : public RecvSink {
 public:
  // Room for messages of up to `capacity` bytes.
  explicit RecordingSink(size_t capacity);

  void Consume(size_t offset, const void* data, size_t bytes) override;

  // Pieces handed over so far (any thread).
  int pieces() const { return pieces_.load(std::memory_order_acquire); }
  // The bytes handed over, at their offsets.
  const std::vector<uint8_t>& data() const { return data_; }
  // OK when the pieces so far obeyed the contract and, if `message_bytes` is set, covered
  // exactly that many bytes once each; else what went wrong first.
  absl::Status Check(size_t message_bytes) const;

 private:
  std::vector<uint8_t> data_;
  std::vector<uint8_t> times_covered_;
  std::atomic<int> pieces_{0};
  std::string first_error_;
};

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_TRANSPORT_RECORDING_SINK_H_
