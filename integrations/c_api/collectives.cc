// The C API's collectives and point-to-point calls: each converts its arguments, calls the
// internal Communicator's method of the same name and reports the outcome (handles.h).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "chorus/chorus_c.h"
#include "chorus/collectives/communicator.h"
#include "chorus/core/status.h"
#include "chorus/integrations/c_api/handles.h"

namespace chorus::c_api {
namespace {

// The value of a successful conversion; else a placeholder, and the first failure is kept in
// `*error`.
template <typename T>
T ValueOrKeepError(absl::StatusOr<T> converted, absl::Status* error) {
  if (converted.ok()) return *std::move(converted);
  if (error->ok()) *error = converted.status();
  return T{};
}

// A C argument as the internal Communicator takes it. Enum values are checked, a `const
// size_t*` (always a per-rank array in chorus_c.h) becomes a span of size() entries, and the
// rest passes through unchanged.
template <typename T, typename = std::enable_if_t<!std::is_enum_v<T>>>
T Internal(const Communicator&, T value, absl::Status*) {
  return value;
}
DataType Internal(const Communicator&, chorus_datatype_t type, absl::Status* error) {
  return ValueOrKeepError(ToDataType(type), error);
}
ReduceOp Internal(const Communicator&, chorus_reduce_op_t op, absl::Status* error) {
  return ValueOrKeepError(ToReduceOp(op), error);
}
absl::Span<const size_t> Internal(const Communicator& comm, const size_t* values,
                                  absl::Status*) {
  return PerRank(comm, values);
}

// Invokes `method` (a Communicator member function, or a callable taking the Communicator
// first) with `args` converted by Internal() and then `options`. An argument that does not
// convert is the result instead, and `method` is not called.
template <typename Result, typename Method, typename... Args>
Result Call(Communicator& comm, Method method, const CollectiveOptions& options,
            const Args&... args) {
  absl::Status error;
  // Braced initialization converts left to right: the first bad argument is the one reported.
  std::tuple<decltype(Internal(comm, args, &error))...> internal{Internal(comm, args, &error)...};
  if (!error.ok()) return error;
  return std::apply(
      [&](const auto&... converted) -> Result {
        return std::invoke(method, comm, converted..., options);
      },
      internal);
}

// A blocking call: `method(communicator, args..., options)` returns its absl::Status.
template <typename Method, typename... Args>
chorus_error_t Blocking(chorus_comm_t* comm, const chorus_call_options_t* call_options,
                        Method method, const Args&... args) {
  return Guard([&]() -> absl::Status {
    if (comm == nullptr) return NullArgument("comm");
    CHORUS_ASSIGN_OR_RETURN(CollectiveOptions options, ToCallOptions(call_options));
    return Call<absl::Status>(*comm->impl, method, options, args...);
  });
}

// An asynchronous call: `method(communicator, args..., options)` returns the Work, stored in
// `*work`. Errors found before launching (null handles, bad enum values) are returned at once;
// the operation's own errors come from chorus_work_wait.
template <typename Method, typename... Args>
chorus_error_t Async(chorus_comm_t* comm, const chorus_call_options_t* call_options,
                     chorus_work_t** work, Method method, const Args&... args) {
  return Guard([&]() -> absl::Status {
    if (work == nullptr) return NullArgument("work");
    *work = nullptr;
    if (comm == nullptr) return NullArgument("comm");
    CHORUS_ASSIGN_OR_RETURN(CollectiveOptions options, ToCallOptions(call_options));
    CHORUS_ASSIGN_OR_RETURN(WorkPtr launched,
                            Call<absl::StatusOr<WorkPtr>>(*comm->impl, method, options, args...));
    *work = new chorus_work{std::move(launched)};
    return absl::OkStatus();
  });
}

}  // namespace
}  // namespace chorus::c_api

using chorus::CollectiveOptions;
using chorus::Communicator;
using chorus::DataType;
using chorus::c_api::Async;
using chorus::c_api::Blocking;

// Defines the entry points `c_name` (blocking) and `c_name##_async` of chorus_c.h over the
// internal Communicator's `Method` and `Method##Async`. `Params` are the parameters the two
// share (`comm` first; the call options, and the async form's `work`, follow them); `Args` are
// the ones passed on to the method, converted by Internal(). The compiler checks each signature
// against its declaration in chorus_c.h, since two C functions cannot share a name.
#define CHORUS_C_BLOCKING_AND_ASYNC(c_name, Method, Params, Args)                              \
  chorus_error_t c_name(CHORUS_C_UNPARENTHESIZE Params,                                       \
                        const chorus_call_options_t* call_options) {                           \
    return Blocking(comm, call_options, &Communicator::Method, CHORUS_C_UNPARENTHESIZE Args);  \
  }                                                                                            \
  chorus_error_t c_name##_async(CHORUS_C_UNPARENTHESIZE Params,                               \
                                const chorus_call_options_t* call_options,                     \
                                chorus_work_t** work) {                                        \
    return Async(comm, call_options, work, &Communicator::Method##Async,                       \
                 CHORUS_C_UNPARENTHESIZE Args);                                                \
  }
#define CHORUS_C_UNPARENTHESIZE(...) __VA_ARGS__

extern "C" {

CHORUS_C_BLOCKING_AND_ASYNC(chorus_allreduce, AllReduce,
                            (chorus_comm_t* comm, const void* send, void* recv, size_t count,
                             chorus_datatype_t type, chorus_reduce_op_t op),
                            (send, recv, count, type, op))

CHORUS_C_BLOCKING_AND_ASYNC(chorus_broadcast, Broadcast,
                            (chorus_comm_t* comm, const void* send, void* recv, size_t count,
                             chorus_datatype_t type, int root),
                            (send, recv, count, type, root))

CHORUS_C_BLOCKING_AND_ASYNC(chorus_reduce, Reduce,
                            (chorus_comm_t* comm, const void* send, void* recv, size_t count,
                             chorus_datatype_t type, chorus_reduce_op_t op, int root),
                            (send, recv, count, type, op, root))

CHORUS_C_BLOCKING_AND_ASYNC(chorus_allgather, AllGather,
                            (chorus_comm_t* comm, const void* send, void* recv, size_t count,
                             chorus_datatype_t type),
                            (send, recv, count, type))

CHORUS_C_BLOCKING_AND_ASYNC(chorus_allgatherv, AllGatherV,
                            (chorus_comm_t* comm, const void* send, void* recv,
                             const size_t* counts, chorus_datatype_t type),
                            (send, recv, counts, type))

CHORUS_C_BLOCKING_AND_ASYNC(chorus_reduce_scatter, ReduceScatter,
                            (chorus_comm_t* comm, const void* send, void* recv, size_t count,
                             chorus_datatype_t type, chorus_reduce_op_t op),
                            (send, recv, count, type, op))

CHORUS_C_BLOCKING_AND_ASYNC(chorus_reduce_scatterv, ReduceScatterV,
                            (chorus_comm_t* comm, const void* send, void* recv,
                             const size_t* counts, chorus_datatype_t type, chorus_reduce_op_t op),
                            (send, recv, counts, type, op))

CHORUS_C_BLOCKING_AND_ASYNC(chorus_gather, Gather,
                            (chorus_comm_t* comm, const void* send, void* recv, size_t count,
                             chorus_datatype_t type, int root),
                            (send, recv, count, type, root))

CHORUS_C_BLOCKING_AND_ASYNC(chorus_gatherv, GatherV,
                            (chorus_comm_t* comm, const void* send, size_t send_count, void* recv,
                             const size_t* counts, const size_t* displs, chorus_datatype_t type,
                             int root),
                            (send, send_count, recv, counts, displs, type, root))

CHORUS_C_BLOCKING_AND_ASYNC(chorus_scatter, Scatter,
                            (chorus_comm_t* comm, const void* send, void* recv, size_t count,
                             chorus_datatype_t type, int root),
                            (send, recv, count, type, root))

CHORUS_C_BLOCKING_AND_ASYNC(chorus_scatterv, ScatterV,
                            (chorus_comm_t* comm, const void* send, const size_t* counts,
                             const size_t* displs, void* recv, size_t recv_count,
                             chorus_datatype_t type, int root),
                            (send, counts, displs, recv, recv_count, type, root))

CHORUS_C_BLOCKING_AND_ASYNC(chorus_alltoall, AllToAll,
                            (chorus_comm_t* comm, const void* send, void* recv, size_t count,
                             chorus_datatype_t type),
                            (send, recv, count, type))

CHORUS_C_BLOCKING_AND_ASYNC(chorus_alltoallv, AllToAllV,
                            (chorus_comm_t* comm, const void* send, const size_t* send_counts,
                             const size_t* send_displs, void* recv, const size_t* recv_counts,
                             const size_t* recv_displs, chorus_datatype_t type),
                            (send, send_counts, send_displs, recv, recv_counts, recv_displs, type))

CHORUS_C_BLOCKING_AND_ASYNC(chorus_send, Send,
                            (chorus_comm_t* comm, const void* data, size_t count,
                             chorus_datatype_t type, int peer, uint32_t tag),
                            (data, count, type, peer, tag))

CHORUS_C_BLOCKING_AND_ASYNC(chorus_recv, Recv,
                            (chorus_comm_t* comm, void* data, size_t count,
                             chorus_datatype_t type, int peer, uint32_t tag),
                            (data, count, type, peer, tag))

// Barrier forwards no argument, and the blocking RecvFromAny has the `from` out-parameter, so
// these two pairs are written out.

chorus_error_t chorus_barrier(chorus_comm_t* comm, const chorus_call_options_t* call_options) {
  return Blocking(comm, call_options, &Communicator::Barrier);
}

chorus_error_t chorus_barrier_async(chorus_comm_t* comm, const chorus_call_options_t* call_options,
                                    chorus_work_t** work) {
  return Async(comm, call_options, work, &Communicator::BarrierAsync);
}

chorus_error_t chorus_recv_from_any(chorus_comm_t* comm, void* data, size_t count,
                                    chorus_datatype_t type, const int* peers, size_t num_peers,
                                    uint32_t tag, int* from,
                                    const chorus_call_options_t* call_options) {
  auto receive = [from](Communicator& c, void* data, size_t count, DataType type,
                        absl::Span<const int> peers, uint32_t tag,
                        const CollectiveOptions& options) -> absl::Status {
    CHORUS_ASSIGN_OR_RETURN(int sender, c.RecvFromAny(data, count, type, peers, tag, options));
    if (from != nullptr) *from = sender;
    return absl::OkStatus();
  };
  return Blocking(comm, call_options, receive, data, count, type,
                  absl::MakeConstSpan(peers, num_peers), tag);
}

chorus_error_t chorus_recv_from_any_async(chorus_comm_t* comm, void* data, size_t count,
                                          chorus_datatype_t type, const int* peers,
                                          size_t num_peers, uint32_t tag,
                                          const chorus_call_options_t* call_options,
                                          chorus_work_t** work) {
  return Async(comm, call_options, work, &Communicator::RecvFromAnyAsync, data, count, type,
               absl::MakeConstSpan(peers, num_peers), tag);
}

}  // extern "C"

#undef CHORUS_C_BLOCKING_AND_ASYNC
#undef CHORUS_C_UNPARENTHESIZE
