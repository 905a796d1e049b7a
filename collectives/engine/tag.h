// How the collectives layer packs its 64-bit transport tags.
//
//   bit 63            48 47 46                         16 15              0
//       +---------------+--+----------------------------+-----------------+
//       | communicator  |P | sequence number (31 bits)  | step            |
//       +---------------+--+----------------------------+-----------------+
//
//   communicator  16 bits of a hash of the communicator's name, so communicators that share
//                 a transport mesh (or a stray message) never match each other's receives.
//   P = 0         a collective: the sequence number counts the communicator's collectives
//                 (mod 2^31; only collectives that are in flight together must differ), and
//                 the step says which message of the algorithm it is. Step 0xffff is the
//                 collective's header (header.h). Algorithms number their steps from 0;
//                 step numbers wrap modulo 0xffff, which is safe because messages with the
//                 same (peer, tag) arrive in order and both sides post them in the same order.
//   P = 1         point-to-point: bits 46..16 carry the caller's tag (31 bits), step is 0.
#ifndef CHORUS_COLLECTIVES_ENGINE_TAG_H_
#define CHORUS_COLLECTIVES_ENGINE_TAG_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "chorus/transport/request.h"

namespace chorus {

inline constexpr uint32_t kHeaderStep = 0xffff;
inline constexpr uint32_t kMaxUserTag = (1u << 31) - 1;

// 16 bits of FNV-1a over the name.
inline uint16_t CommunicatorTagId(absl::string_view name) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return static_cast<uint16_t>(hash ^ (hash >> 16) ^ (hash >> 32) ^ (hash >> 48));
}

inline Tag CollectiveTag(uint16_t communicator, uint64_t sequence, uint64_t step) {
  const uint64_t wrapped_step = step == kHeaderStep ? kHeaderStep : step % kHeaderStep;
  return (static_cast<Tag>(communicator) << 48) | ((sequence & 0x7fffffffull) << 16) | wrapped_step;
}

inline Tag PointToPointTag(uint16_t communicator, uint32_t user_tag) {
  return (static_cast<Tag>(communicator) << 48) | (1ull << 47) |
         (static_cast<Tag>(user_tag & kMaxUserTag) << 16);
}

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_ENGINE_TAG_H_
