// The C API's collectives and point-to-point calls: each converts its arguments, calls the
// internal Communicator's method of the same name and reports the outcome (handles.h).
#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "chorus/chorus_c.h"
#include "chorus/collectives/communicator.h"
#include "chorus/core/status.h"
#include "chorus/integrations/c_api/handles.h"

namespace chorus::c_api {
namespace {

// A blocking call: `call(communicator, options)` returns its absl::Status.
template <typename Call>
chorus_error_t Blocking(chorus_comm_t* comm, const chorus_call_options_t* call_options,
                        Call&& call) {
  return Guard([&]() -> absl::Status {
    if (comm == nullptr) return NullArgument("comm");
    CHORUS_ASSIGN_OR_RETURN(CollectiveOptions options, ToCallOptions(call_options));
    return call(*comm->impl, options);
  });
}

// An asynchronous call: `launch(communicator, options)` returns the Work, stored in `*work`.
// Errors found before launching (null handles, bad enum values) are returned at once; the
// operation's own errors come from chorus_work_wait.
template <typename Launch>
chorus_error_t Async(chorus_comm_t* comm, const chorus_call_options_t* call_options,
                     chorus_work_t** work, Launch&& launch) {
  return Guard([&]() -> absl::Status {
    if (work == nullptr) return NullArgument("work");
    *work = nullptr;
    if (comm == nullptr) return NullArgument("comm");
    CHORUS_ASSIGN_OR_RETURN(CollectiveOptions options, ToCallOptions(call_options));
    CHORUS_ASSIGN_OR_RETURN(WorkPtr launched, launch(*comm->impl, options));
    *work = new chorus_work{std::move(launched)};
    return absl::OkStatus();
  });
}

}  // namespace
}  // namespace chorus::c_api

using chorus::CollectiveOptions;
using chorus::Communicator;
using chorus::DataType;
using chorus::ReduceOp;
using chorus::WorkPtr;
using chorus::c_api::Async;
using chorus::c_api::Blocking;
using chorus::c_api::PerRank;
using chorus::c_api::ToDataType;
using chorus::c_api::ToReduceOp;

extern "C" {

chorus_error_t chorus_allreduce(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                                chorus_datatype_t type, chorus_reduce_op_t op,
                                const chorus_call_options_t* call_options) {
  return Blocking(comm, call_options,
                  [&](Communicator& c, const CollectiveOptions& options) -> absl::Status {
                    CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                    CHORUS_ASSIGN_OR_RETURN(ReduceOp o, ToReduceOp(op));
                    return c.AllReduce(send, recv, count, t, o, options);
                  });
}

chorus_error_t chorus_allreduce_async(chorus_comm_t* comm, const void* send, void* recv,
                                      size_t count, chorus_datatype_t type, chorus_reduce_op_t op,
                                      const chorus_call_options_t* call_options,
                                      chorus_work_t** work) {
  return Async(comm, call_options, work,
               [&](Communicator& c, const CollectiveOptions& options) -> absl::StatusOr<WorkPtr> {
                 CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                 CHORUS_ASSIGN_OR_RETURN(ReduceOp o, ToReduceOp(op));
                 return c.AllReduceAsync(send, recv, count, t, o, options);
               });
}

chorus_error_t chorus_broadcast(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                                chorus_datatype_t type, int root,
                                const chorus_call_options_t* call_options) {
  return Blocking(comm, call_options,
                  [&](Communicator& c, const CollectiveOptions& options) -> absl::Status {
                    CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                    return c.Broadcast(send, recv, count, t, root, options);
                  });
}

chorus_error_t chorus_broadcast_async(chorus_comm_t* comm, const void* send, void* recv,
                                      size_t count, chorus_datatype_t type, int root,
                                      const chorus_call_options_t* call_options,
                                      chorus_work_t** work) {
  return Async(comm, call_options, work,
               [&](Communicator& c, const CollectiveOptions& options) -> absl::StatusOr<WorkPtr> {
                 CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                 return c.BroadcastAsync(send, recv, count, t, root, options);
               });
}

chorus_error_t chorus_reduce(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                             chorus_datatype_t type, chorus_reduce_op_t op, int root,
                             const chorus_call_options_t* call_options) {
  return Blocking(comm, call_options,
                  [&](Communicator& c, const CollectiveOptions& options) -> absl::Status {
                    CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                    CHORUS_ASSIGN_OR_RETURN(ReduceOp o, ToReduceOp(op));
                    return c.Reduce(send, recv, count, t, o, root, options);
                  });
}

chorus_error_t chorus_reduce_async(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                                   chorus_datatype_t type, chorus_reduce_op_t op, int root,
                                   const chorus_call_options_t* call_options,
                                   chorus_work_t** work) {
  return Async(comm, call_options, work,
               [&](Communicator& c, const CollectiveOptions& options) -> absl::StatusOr<WorkPtr> {
                 CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                 CHORUS_ASSIGN_OR_RETURN(ReduceOp o, ToReduceOp(op));
                 return c.ReduceAsync(send, recv, count, t, o, root, options);
               });
}

chorus_error_t chorus_allgather(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                                chorus_datatype_t type, const chorus_call_options_t* call_options) {
  return Blocking(comm, call_options,
                  [&](Communicator& c, const CollectiveOptions& options) -> absl::Status {
                    CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                    return c.AllGather(send, recv, count, t, options);
                  });
}

chorus_error_t chorus_allgather_async(chorus_comm_t* comm, const void* send, void* recv,
                                      size_t count, chorus_datatype_t type,
                                      const chorus_call_options_t* call_options,
                                      chorus_work_t** work) {
  return Async(comm, call_options, work,
               [&](Communicator& c, const CollectiveOptions& options) -> absl::StatusOr<WorkPtr> {
                 CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                 return c.AllGatherAsync(send, recv, count, t, options);
               });
}

chorus_error_t chorus_allgatherv(chorus_comm_t* comm, const void* send, void* recv,
                                 const size_t* counts, chorus_datatype_t type,
                                 const chorus_call_options_t* call_options) {
  return Blocking(comm, call_options,
                  [&](Communicator& c, const CollectiveOptions& options) -> absl::Status {
                    CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                    return c.AllGatherV(send, recv, PerRank(c, counts), t, options);
                  });
}

chorus_error_t chorus_allgatherv_async(chorus_comm_t* comm, const void* send, void* recv,
                                       const size_t* counts, chorus_datatype_t type,
                                       const chorus_call_options_t* call_options,
                                       chorus_work_t** work) {
  return Async(comm, call_options, work,
               [&](Communicator& c, const CollectiveOptions& options) -> absl::StatusOr<WorkPtr> {
                 CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                 return c.AllGatherVAsync(send, recv, PerRank(c, counts), t, options);
               });
}

chorus_error_t chorus_reduce_scatter(chorus_comm_t* comm, const void* send, void* recv,
                                     size_t count, chorus_datatype_t type, chorus_reduce_op_t op,
                                     const chorus_call_options_t* call_options) {
  return Blocking(comm, call_options,
                  [&](Communicator& c, const CollectiveOptions& options) -> absl::Status {
                    CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                    CHORUS_ASSIGN_OR_RETURN(ReduceOp o, ToReduceOp(op));
                    return c.ReduceScatter(send, recv, count, t, o, options);
                  });
}

chorus_error_t chorus_reduce_scatter_async(chorus_comm_t* comm, const void* send, void* recv,
                                           size_t count, chorus_datatype_t type,
                                           chorus_reduce_op_t op,
                                           const chorus_call_options_t* call_options,
                                           chorus_work_t** work) {
  return Async(comm, call_options, work,
               [&](Communicator& c, const CollectiveOptions& options) -> absl::StatusOr<WorkPtr> {
                 CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                 CHORUS_ASSIGN_OR_RETURN(ReduceOp o, ToReduceOp(op));
                 return c.ReduceScatterAsync(send, recv, count, t, o, options);
               });
}

chorus_error_t chorus_reduce_scatterv(chorus_comm_t* comm, const void* send, void* recv,
                                      const size_t* counts, chorus_datatype_t type,
                                      chorus_reduce_op_t op,
                                      const chorus_call_options_t* call_options) {
  return Blocking(comm, call_options,
                  [&](Communicator& c, const CollectiveOptions& options) -> absl::Status {
                    CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                    CHORUS_ASSIGN_OR_RETURN(ReduceOp o, ToReduceOp(op));
                    return c.ReduceScatterV(send, recv, PerRank(c, counts), t, o, options);
                  });
}

chorus_error_t chorus_reduce_scatterv_async(chorus_comm_t* comm, const void* send, void* recv,
                                            const size_t* counts, chorus_datatype_t type,
                                            chorus_reduce_op_t op,
                                            const chorus_call_options_t* call_options,
                                            chorus_work_t** work) {
  return Async(comm, call_options, work,
               [&](Communicator& c, const CollectiveOptions& options) -> absl::StatusOr<WorkPtr> {
                 CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                 CHORUS_ASSIGN_OR_RETURN(ReduceOp o, ToReduceOp(op));
                 return c.ReduceScatterVAsync(send, recv, PerRank(c, counts), t, o, options);
               });
}

chorus_error_t chorus_gather(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                             chorus_datatype_t type, int root,
                             const chorus_call_options_t* call_options) {
  return Blocking(comm, call_options,
                  [&](Communicator& c, const CollectiveOptions& options) -> absl::Status {
                    CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                    return c.Gather(send, recv, count, t, root, options);
                  });
}

chorus_error_t chorus_gather_async(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                                   chorus_datatype_t type, int root,
                                   const chorus_call_options_t* call_options,
                                   chorus_work_t** work) {
  return Async(comm, call_options, work,
               [&](Communicator& c, const CollectiveOptions& options) -> absl::StatusOr<WorkPtr> {
                 CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                 return c.GatherAsync(send, recv, count, t, root, options);
               });
}

chorus_error_t chorus_gatherv(chorus_comm_t* comm, const void* send, size_t send_count, void* recv,
                              const size_t* counts, const size_t* displs, chorus_datatype_t type,
                              int root, const chorus_call_options_t* call_options) {
  return Blocking(comm, call_options,
                  [&](Communicator& c, const CollectiveOptions& options) -> absl::Status {
                    CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                    return c.GatherV(send, send_count, recv, PerRank(c, counts), PerRank(c, displs),
                                     t, root, options);
                  });
}

chorus_error_t chorus_gatherv_async(chorus_comm_t* comm, const void* send, size_t send_count,
                                    void* recv, const size_t* counts, const size_t* displs,
                                    chorus_datatype_t type, int root,
                                    const chorus_call_options_t* call_options,
                                    chorus_work_t** work) {
  return Async(comm, call_options, work,
               [&](Communicator& c, const CollectiveOptions& options) -> absl::StatusOr<WorkPtr> {
                 CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                 return c.GatherVAsync(send, send_count, recv, PerRank(c, counts),
                                       PerRank(c, displs), t, root, options);
               });
}

chorus_error_t chorus_scatter(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                              chorus_datatype_t type, int root,
                              const chorus_call_options_t* call_options) {
  return Blocking(comm, call_options,
                  [&](Communicator& c, const CollectiveOptions& options) -> absl::Status {
                    CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                    return c.Scatter(send, recv, count, t, root, options);
                  });
}

chorus_error_t chorus_scatter_async(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                                    chorus_datatype_t type, int root,
                                    const chorus_call_options_t* call_options,
                                    chorus_work_t** work) {
  return Async(comm, call_options, work,
               [&](Communicator& c, const CollectiveOptions& options) -> absl::StatusOr<WorkPtr> {
                 CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                 return c.ScatterAsync(send, recv, count, t, root, options);
               });
}

chorus_error_t chorus_scatterv(chorus_comm_t* comm, const void* send, const size_t* counts,
                               const size_t* displs, void* recv, size_t recv_count,
                               chorus_datatype_t type, int root,
                               const chorus_call_options_t* call_options) {
  return Blocking(comm, call_options,
                  [&](Communicator& c, const CollectiveOptions& options) -> absl::Status {
                    CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                    return c.ScatterV(send, PerRank(c, counts), PerRank(c, displs), recv,
                                      recv_count, t, root, options);
                  });
}

chorus_error_t chorus_scatterv_async(chorus_comm_t* comm, const void* send, const size_t* counts,
                                     const size_t* displs, void* recv, size_t recv_count,
                                     chorus_datatype_t type, int root,
                                     const chorus_call_options_t* call_options,
                                     chorus_work_t** work) {
  return Async(comm, call_options, work,
               [&](Communicator& c, const CollectiveOptions& options) -> absl::StatusOr<WorkPtr> {
                 CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                 return c.ScatterVAsync(send, PerRank(c, counts), PerRank(c, displs), recv,
                                        recv_count, t, root, options);
               });
}

chorus_error_t chorus_alltoall(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                               chorus_datatype_t type, const chorus_call_options_t* call_options) {
  return Blocking(comm, call_options,
                  [&](Communicator& c, const CollectiveOptions& options) -> absl::Status {
                    CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                    return c.AllToAll(send, recv, count, t, options);
                  });
}

chorus_error_t chorus_alltoall_async(chorus_comm_t* comm, const void* send, void* recv,
                                     size_t count, chorus_datatype_t type,
                                     const chorus_call_options_t* call_options,
                                     chorus_work_t** work) {
  return Async(comm, call_options, work,
               [&](Communicator& c, const CollectiveOptions& options) -> absl::StatusOr<WorkPtr> {
                 CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                 return c.AllToAllAsync(send, recv, count, t, options);
               });
}

chorus_error_t chorus_alltoallv(chorus_comm_t* comm, const void* send, const size_t* send_counts,
                                const size_t* send_displs, void* recv, const size_t* recv_counts,
                                const size_t* recv_displs, chorus_datatype_t type,
                                const chorus_call_options_t* call_options) {
  return Blocking(
      comm, call_options, [&](Communicator& c, const CollectiveOptions& options) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
        return c.AllToAllV(send, PerRank(c, send_counts), PerRank(c, send_displs), recv,
                           PerRank(c, recv_counts), PerRank(c, recv_displs), t, options);
      });
}

chorus_error_t chorus_alltoallv_async(chorus_comm_t* comm, const void* send,
                                      const size_t* send_counts, const size_t* send_displs,
                                      void* recv, const size_t* recv_counts,
                                      const size_t* recv_displs, chorus_datatype_t type,
                                      const chorus_call_options_t* call_options,
                                      chorus_work_t** work) {
  return Async(comm, call_options, work,
               [&](Communicator& c, const CollectiveOptions& options) -> absl::StatusOr<WorkPtr> {
                 CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                 return c.AllToAllVAsync(send, PerRank(c, send_counts), PerRank(c, send_displs),
                                         recv, PerRank(c, recv_counts), PerRank(c, recv_displs), t,
                                         options);
               });
}

chorus_error_t chorus_barrier(chorus_comm_t* comm, const chorus_call_options_t* call_options) {
  return Blocking(comm, call_options,
                  [&](Communicator& c, const CollectiveOptions& options) -> absl::Status {
                    return c.Barrier(options);
                  });
}

chorus_error_t chorus_barrier_async(chorus_comm_t* comm, const chorus_call_options_t* call_options,
                                    chorus_work_t** work) {
  return Async(comm, call_options, work,
               [&](Communicator& c, const CollectiveOptions& options) -> absl::StatusOr<WorkPtr> {
                 return c.BarrierAsync(options);
               });
}

chorus_error_t chorus_send(chorus_comm_t* comm, const void* data, size_t count,
                           chorus_datatype_t type, int peer, uint32_t tag,
                           const chorus_call_options_t* call_options) {
  return Blocking(comm, call_options,
                  [&](Communicator& c, const CollectiveOptions& options) -> absl::Status {
                    CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                    return c.Send(data, count, t, peer, tag, options);
                  });
}

chorus_error_t chorus_send_async(chorus_comm_t* comm, const void* data, size_t count,
                                 chorus_datatype_t type, int peer, uint32_t tag,
                                 const chorus_call_options_t* call_options, chorus_work_t** work) {
  return Async(comm, call_options, work,
               [&](Communicator& c, const CollectiveOptions& options) -> absl::StatusOr<WorkPtr> {
                 CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                 return c.SendAsync(data, count, t, peer, tag, options);
               });
}

chorus_error_t chorus_recv(chorus_comm_t* comm, void* data, size_t count, chorus_datatype_t type,
                           int peer, uint32_t tag, const chorus_call_options_t* call_options) {
  return Blocking(comm, call_options,
                  [&](Communicator& c, const CollectiveOptions& options) -> absl::Status {
                    CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                    return c.Recv(data, count, t, peer, tag, options);
                  });
}

chorus_error_t chorus_recv_async(chorus_comm_t* comm, void* data, size_t count,
                                 chorus_datatype_t type, int peer, uint32_t tag,
                                 const chorus_call_options_t* call_options, chorus_work_t** work) {
  return Async(comm, call_options, work,
               [&](Communicator& c, const CollectiveOptions& options) -> absl::StatusOr<WorkPtr> {
                 CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                 return c.RecvAsync(data, count, t, peer, tag, options);
               });
}

chorus_error_t chorus_recv_from_any(chorus_comm_t* comm, void* data, size_t count,
                                    chorus_datatype_t type, const int* peers, size_t num_peers,
                                    uint32_t tag, int* from,
                                    const chorus_call_options_t* call_options) {
  return Blocking(
      comm, call_options, [&](Communicator& c, const CollectiveOptions& options) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
        CHORUS_ASSIGN_OR_RETURN(
            int sender,
            c.RecvFromAny(data, count, t, absl::MakeConstSpan(peers, num_peers), tag, options));
        if (from != nullptr) *from = sender;
        return absl::OkStatus();
      });
}

chorus_error_t chorus_recv_from_any_async(chorus_comm_t* comm, void* data, size_t count,
                                          chorus_datatype_t type, const int* peers,
                                          size_t num_peers, uint32_t tag,
                                          const chorus_call_options_t* call_options,
                                          chorus_work_t** work) {
  return Async(comm, call_options, work,
               [&](Communicator& c, const CollectiveOptions& options) -> absl::StatusOr<WorkPtr> {
                 CHORUS_ASSIGN_OR_RETURN(DataType t, ToDataType(type));
                 return c.RecvFromAnyAsync(data, count, t, absl::MakeConstSpan(peers, num_peers),
                                           tag, options);
               });
}

}  // extern "C"
