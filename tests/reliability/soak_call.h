// The soak test's calls: a seeded sequence, the same on every rank, of allreduce, broadcast,
// allgather, reduce-scatter, alltoall and barrier calls in int32, int64, float32 and float64,
// mostly small (0-64 elements) and sometimes large (up to 64 Ki elements per block), blocking
// or asynchronous; every result is checked exactly.
#ifndef CHORUS_TESTS_RELIABILITY_SOAK_CALL_H_
#define CHORUS_TESTS_RELIABILITY_SOAK_CALL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "chorus/collectives/communicator.h"

namespace chorus::testing {

// Runs calls [first, first + n) of sequence `stream` on `comm` and checks them; up to three
// asynchronous calls are in flight at once.
absl::Status RunSoakRound(Communicator& comm, int stream, int64_t first, int n);

// Runs every kind in every type at every large size once, blocking and asynchronous.
absl::Status RunSoakWarmup(Communicator& comm, int stream);

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_RELIABILITY_SOAK_CALL_H_
