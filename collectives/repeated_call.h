// The last blocking call a thread made on a communicator, kept so that the next call with the
// same arguments (the loop of a training step, a benchmark, a run of barriers) skips what those
// arguments alone decide: the checks, the buffers' placement, the algorithm's choice and the
// header. A small call spends a quarter of its bookkeeping there.
//
// Per thread, since a communicator may be called from several, and keyed by the
// communicator's process-unique id, so that a call checked on one is never taken as checked on
// another. Only calls whose arguments are a handful of scalars are kept: none with per-rank
// vectors, device buffers, a named algorithm or buffers whose placement must be looked up (a
// CUDA build), whose outcome depends on more than the fields compared here.
#ifndef CHORUS_COLLECTIVES_REPEATED_CALL_H_
#define CHORUS_COLLECTIVES_REPEATED_CALL_H_

#include <cstdint>

#include "chorus/collectives/collective_args.h"
#include "chorus/collectives/engine/header.h"
#include "chorus/collectives/options.h"

namespace chorus {

struct AlgorithmEntry;

struct RepeatedCall {
  const AlgorithmEntry* algorithm = nullptr;
  // The call's header but for its sequence number, which each call takes anew.
  CollectiveHeader header;
};

// Whether a call may be kept and found: see above. `placement_asked`: the buffers' placement
// would be looked up (PlacementAsked).
bool RepeatableCall(const CollectiveArgs& args, const CollectiveOptions& options,
                    bool placement_asked);

// What this thread kept for communicator `communicator` if its last kept call there had
// exactly these arguments; null otherwise. For a RepeatableCall only.
const RepeatedCall* FindRepeatedCall(uint64_t communicator, const CollectiveArgs& args);

// Keeps a RepeatableCall that passed the checks, with its algorithm and header, replacing what
// this thread kept before.
void KeepRepeatedCall(uint64_t communicator, const CollectiveArgs& args,
                      const AlgorithmEntry* algorithm, const CollectiveHeader& header);

// A new id, never handed out before in this process.
uint64_t NewCommunicatorId();

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_REPEATED_CALL_H_
