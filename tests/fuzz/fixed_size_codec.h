// The properties every decoder of a fixed-size wire message promises, checked in one place
// for the fuzz targets: it accepts nothing shorter than the message, reads nothing past it
// (the exact prefix gets the same verdict as the whole input), and what it accepts re-encodes
// to exactly the bytes it came from, so no field, reserved bit or version is silently dropped.
#ifndef CHORUS_TESTS_FUZZ_FIXED_SIZE_CODEC_H_
#define CHORUS_TESTS_FUZZ_FIXED_SIZE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/types/span.h"
#include "tests/fuzz/fuzz_check.h"

namespace chorus::testing {

// `decode(span)` returns absl::StatusOr<T>; `encode(const T&)` a container of `message_size`
// bytes. Returns the decoded value for the target's own checks, nullopt if it was refused.
template <typename Decode, typename Encode>
auto CheckFixedSizeCodec(absl::Span<const uint8_t> input, size_t message_size, const Decode& decode,
                         const Encode& encode)
    -> std::optional<typename decltype(decode(input))::value_type> {
  auto decoded = decode(input);
  if (input.size() < message_size) {
    FUZZ_CHECK(!decoded.ok());
    return std::nullopt;
  }
  const absl::Span<const uint8_t> message = input.first(message_size);
  FUZZ_CHECK(decode(message).ok() == decoded.ok());
  if (!decoded.ok()) return std::nullopt;
  const auto encoded = encode(*decoded);
  FUZZ_CHECK(absl::MakeConstSpan(encoded) == message);
  return *std::move(decoded);
}

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_FUZZ_FIXED_SIZE_CODEC_H_
