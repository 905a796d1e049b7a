// Modular rank arithmetic, shared by the engine's rank orders (header_ring.h) and the
// algorithms.
#ifndef CHORUS_COLLECTIVES_ENGINE_RANK_ARITHMETIC_H_
#define CHORUS_COLLECTIVES_ENGINE_RANK_ARITHMETIC_H_

namespace chorus {

// `value` modulo `modulus` (> 0), in [0, modulus) also for a negative `value`.
inline int Mod(int value, int modulus) { return ((value % modulus) + modulus) % modulus; }

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_ENGINE_RANK_ARITHMETIC_H_
