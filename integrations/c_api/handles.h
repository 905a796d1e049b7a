// What the opaque handles of chorus_c.h hold, and the helpers every C entry point shares: the
// conversion of C arguments to the internal ones and the boundary that turns an absl::Status
// (or an exception) into an error code plus the thread's last-error message.
#ifndef CHORUS_INTEGRATIONS_C_API_HANDLES_H_
#define CHORUS_INTEGRATIONS_C_API_HANDLES_H_

#include <exception>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "chorus/chorus_c.h"
#include "chorus/collectives/communicator.h"
#include "chorus/collectives/options.h"
#include "chorus/collectives/work.h"
#include "chorus/core/types.h"
#include "chorus/rendezvous/store.h"
#include "chorus/transport/transport.h"

struct chorus_store {
  std::unique_ptr<chorus::Store> impl;
};
struct chorus_device {
  std::unique_ptr<chorus::Device> impl;
};
struct chorus_comm {
  std::unique_ptr<chorus::Communicator> impl;
};
struct chorus_work {
  chorus::WorkPtr impl;
};

namespace chorus::c_api {

// Records `status` as the calling thread's last error when it is one; returns its code.
chorus_error_t Report(const absl::Status& status);

// Runs `body` (returning absl::Status) and reports its outcome. Exceptions (allocation
// failures, a std::system_error from a thread that cannot start) become CHORUS_ERR_INTERNAL:
// none may unwind into a C caller.
template <typename Body>
chorus_error_t Guard(Body&& body) {
  try {
    return Report(body());
  } catch (const std::exception& e) {
    return Report(absl::InternalError(e.what()));
  } catch (...) {
    return Report(absl::InternalError("unknown exception"));
  }
}

// kInvalidArgument "<what> is null", for a null handle or out-pointer.
absl::Status NullArgument(const char* what);

absl::StatusOr<DataType> ToDataType(chorus_datatype_t type);
absl::StatusOr<ReduceOp> ToReduceOp(chorus_reduce_op_t op);
// The per-call options (`options` may be null), reading only the fields its struct_size covers.
absl::StatusOr<CollectiveOptions> ToCallOptions(const chorus_call_options_t* options);
absl::StatusOr<CommunicatorOptions> ToCommOptions(const chorus_comm_options_t* options);

// One entry per rank of `comm` from `values`, or an empty span when `values` is null (the
// arrays a rank does not use).
absl::Span<const size_t> PerRank(const Communicator& comm, const size_t* values);

}  // namespace chorus::c_api

#endif  // CHORUS_INTEGRATIONS_C_API_HANDLES_H_
