// Implementation detail of the C++ API: Communicator's methods, inline over chorus_c.h so that
// libchorus exports only the C ABI. Not part of the contract; included by communicator.h.
#ifndef CHORUS_DETAIL_COMMUNICATOR_INL_H_
#define CHORUS_DETAIL_COMMUNICATOR_INL_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "chorus/chorus_c.h"
#include "chorus/communicator.h"

namespace chorus {
inline namespace v0 {
namespace detail {

// The C form of each argument a method passes on to chorus_c.h. Numbers and pointers pass
// through; enums and per-rank arrays have an overload each (an enum without one is a compile
// error rather than a silent cast).
template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T> || std::is_pointer_v<T>>>
T ToC(T value) {
  return value;
}
inline chorus_datatype_t ToC(DataType type) { return static_cast<chorus_datatype_t>(type); }
inline chorus_reduce_op_t ToC(ReduceOp op) { return static_cast<chorus_reduce_op_t>(op); }
// Per-rank arrays go to C as pointers to size() entries; an empty one as null ("not used").
inline const size_t* ToC(const std::vector<size_t>& values) {
  return values.empty() ? nullptr : values.data();
}
inline chorus_call_options_t ToC(const CallOptions& options) {
  chorus_call_options_t c_options = CHORUS_CALL_OPTIONS_INIT;
  c_options.timeout_seconds = options.timeout_seconds;
  c_options.algorithm = options.algorithm.empty() ? nullptr : options.algorithm.c_str();
  c_options.memory = static_cast<chorus_memory_t>(options.memory);
  c_options.cuda_stream = options.cuda_stream;
  return c_options;
}

// A per-rank array is empty or has one entry per rank of `comm`: C reads size() entries.
inline Status CheckPerRank(const chorus_comm_t* comm, const std::vector<size_t>& array) {
  const int size = chorus_comm_size(comm);
  if (array.empty() || array.size() == static_cast<size_t>(size)) return Status();
  return Status(ErrorKind::kInvalidArgument,
                "a per-rank array has " + std::to_string(array.size()) +
                    " entries; the communicator has " + std::to_string(size) + " ranks");
}
// Any other argument needs no check.
template <typename T>
Status CheckPerRank(const chorus_comm_t*, const T&) {
  return Status();
}
// The first failed check among `args`, or OK (`comm` is unused when there are none).
template <typename... Args>
Status CheckAllPerRank([[maybe_unused]] const chorus_comm_t* comm, const Args&... args) {
  for (const Status& checked : std::initializer_list<Status>{CheckPerRank(comm, args)...}) {
    if (!checked.ok()) return checked;
  }
  return Status();
}

}  // namespace detail

template <typename CFunction, typename... Args>
inline StatusOr<Communicator> Communicator::Make(CFunction c_function, const Args&... args) {
  chorus_comm_t* handle = nullptr;
  Status status = detail::FromC(c_function(args..., &handle));
  if (!status.ok()) return status;
  return Communicator(handle);
}

inline StatusOr<Communicator> Communicator::Create(Store& store, const std::string& name,
                                                   Device& device, int rank, int size,
                                                   const CommunicatorOptions& options) {
  chorus_comm_options_t c_options = CHORUS_COMM_OPTIONS_INIT;
  c_options.timeout_seconds = options.timeout_seconds;
  c_options.connect_timeout_seconds = options.connect_timeout_seconds;
  c_options.worker_threads = options.worker_threads;
  c_options.algorithm_rules =
      options.algorithm_rules.empty() ? nullptr : options.algorithm_rules.c_str();
  return Make(chorus_comm_create, store.c_handle(), name.c_str(), device.c_handle(), rank, size,
              &c_options);
}

inline StatusOr<Communicator> Communicator::Split(int color, int key) {
  return Make(chorus_comm_split, handle_.get(), color, key);
}

inline StatusOr<Communicator> Communicator::CreateGroup(const std::vector<int>& ranks) {
  return Make(chorus_comm_create_group, handle_.get(), ranks.data(), ranks.size());
}

inline StatusOr<Communicator> Communicator::Shrink(const std::vector<int>& excluded) {
  return Make(chorus_comm_shrink, handle_.get(), excluded.data(), excluded.size());
}

inline std::string Communicator::FlightRecorderDump() const {
  // The dump can grow between the two calls; the second one's length says if it did.
  std::string dump(chorus_comm_flight_recorder_dump(handle_.get(), nullptr, 0), '\0');
  for (;;) {
    const size_t length =
        chorus_comm_flight_recorder_dump(handle_.get(), dump.data(), dump.size() + 1);
    if (length <= dump.size()) {
      dump.resize(length);
      return dump;
    }
    dump.assign(length, '\0');
  }
}

template <typename CFunction, typename... Args>
inline Status Communicator::CallBlocking(CFunction c_function, const CallOptions& options,
                                         const Args&... args) {
  Status checked = detail::CheckAllPerRank(handle_.get(), args...);
  if (!checked.ok()) return checked;
  const chorus_call_options_t c_options = detail::ToC(options);
  return detail::FromC(c_function(handle_.get(), detail::ToC(args)..., &c_options));
}

template <typename CFunction, typename... Args>
inline Work Communicator::CallAsync(CFunction c_function, const CallOptions& options,
                                    const Args&... args) {
  Status checked = detail::CheckAllPerRank(handle_.get(), args...);
  if (!checked.ok()) return Work(nullptr, checked);
  const chorus_call_options_t c_options = detail::ToC(options);
  chorus_work_t* work = nullptr;
  const chorus_error_t code = c_function(handle_.get(), detail::ToC(args)..., &c_options, &work);
  return Work(code == CHORUS_OK ? work : nullptr, detail::FromC(code));
}

// Each method passes its own arguments, in chorus_c.h's order, to its C function.

inline Status Communicator::AllReduce(const void* send, void* recv, size_t count, DataType type,
                                      ReduceOp op, const CallOptions& options) {
  return CallBlocking(chorus_allreduce, options, send, recv, count, type, op);
}
inline Work Communicator::AllReduceAsync(const void* send, void* recv, size_t count, DataType type,
                                         ReduceOp op, const CallOptions& options) {
  return CallAsync(chorus_allreduce_async, options, send, recv, count, type, op);
}

inline Status Communicator::Broadcast(const void* send, void* recv, size_t count, DataType type,
                                      int root, const CallOptions& options) {
  return CallBlocking(chorus_broadcast, options, send, recv, count, type, root);
}
inline Work Communicator::BroadcastAsync(const void* send, void* recv, size_t count, DataType type,
                                         int root, const CallOptions& options) {
  return CallAsync(chorus_broadcast_async, options, send, recv, count, type, root);
}

inline Status Communicator::Reduce(const void* send, void* recv, size_t count, DataType type,
                                   ReduceOp op, int root, const CallOptions& options) {
  return CallBlocking(chorus_reduce, options, send, recv, count, type, op, root);
}
inline Work Communicator::ReduceAsync(const void* send, void* recv, size_t count, DataType type,
                                      ReduceOp op, int root, const CallOptions& options) {
  return CallAsync(chorus_reduce_async, options, send, recv, count, type, op, root);
}

inline Status Communicator::AllGather(const void* send, void* recv, size_t count, DataType type,
                                      const CallOptions& options) {
  return CallBlocking(chorus_allgather, options, send, recv, count, type);
}
inline Work Communicator::AllGatherAsync(const void* send, void* recv, size_t count, DataType type,
                                         const CallOptions& options) {
  return CallAsync(chorus_allgather_async, options, send, recv, count, type);
}

inline Status Communicator::AllGatherV(const void* send, void* recv,
                                       const std::vector<size_t>& counts, DataType type,
                                       const CallOptions& options) {
  return CallBlocking(chorus_allgatherv, options, send, recv, counts, type);
}
inline Work Communicator::AllGatherVAsync(const void* send, void* recv,
                                          const std::vector<size_t>& counts, DataType type,
                                          const CallOptions& options) {
  return CallAsync(chorus_allgatherv_async, options, send, recv, counts, type);
}

inline Status Communicator::ReduceScatter(const void* send, void* recv, size_t count, DataType type,
                                          ReduceOp op, const CallOptions& options) {
  return CallBlocking(chorus_reduce_scatter, options, send, recv, count, type, op);
}
inline Work Communicator::ReduceScatterAsync(const void* send, void* recv, size_t count,
                                             DataType type, ReduceOp op,
                                             const CallOptions& options) {
  return CallAsync(chorus_reduce_scatter_async, options, send, recv, count, type, op);
}

inline Status Communicator::ReduceScatterV(const void* send, void* recv,
                                           const std::vector<size_t>& counts, DataType type,
                                           ReduceOp op, const CallOptions& options) {
  return CallBlocking(chorus_reduce_scatterv, options, send, recv, counts, type, op);
}
inline Work Communicator::ReduceScatterVAsync(const void* send, void* recv,
                                              const std::vector<size_t>& counts, DataType type,
                                              ReduceOp op, const CallOptions& options) {
  return CallAsync(chorus_reduce_scatterv_async, options, send, recv, counts, type, op);
}

inline Status Communicator::Gather(const void* send, void* recv, size_t count, DataType type,
                                   int root, const CallOptions& options) {
  return CallBlocking(chorus_gather, options, send, recv, count, type, root);
}
inline Work Communicator::GatherAsync(const void* send, void* recv, size_t count, DataType type,
                                      int root, const CallOptions& options) {
  return CallAsync(chorus_gather_async, options, send, recv, count, type, root);
}

inline Status Communicator::GatherV(const void* send, size_t send_count, void* recv,
                                    const std::vector<size_t>& counts,
                                    const std::vector<size_t>& displs, DataType type, int root,
                                    const CallOptions& options) {
  return CallBlocking(chorus_gatherv, options, send, send_count, recv, counts, displs, type, root);
}
inline Work Communicator::GatherVAsync(const void* send, size_t send_count, void* recv,
                                       const std::vector<size_t>& counts,
                                       const std::vector<size_t>& displs, DataType type, int root,
                                       const CallOptions& options) {
  return CallAsync(chorus_gatherv_async, options, send, send_count, recv, counts, displs, type,
                   root);
}

inline Status Communicator::Scatter(const void* send, void* recv, size_t count, DataType type,
                                    int root, const CallOptions& options) {
  return CallBlocking(chorus_scatter, options, send, recv, count, type, root);
}
inline Work Communicator::ScatterAsync(const void* send, void* recv, size_t count, DataType type,
                                       int root, const CallOptions& options) {
  return CallAsync(chorus_scatter_async, options, send, recv, count, type, root);
}

inline Status Communicator::ScatterV(const void* send, const std::vector<size_t>& counts,
                                     const std::vector<size_t>& displs, void* recv,
                                     size_t recv_count, DataType type, int root,
                                     const CallOptions& options) {
  return CallBlocking(chorus_scatterv, options, send, counts, displs, recv, recv_count, type,
                      root);
}
inline Work Communicator::ScatterVAsync(const void* send, const std::vector<size_t>& counts,
                                        const std::vector<size_t>& displs, void* recv,
                                        size_t recv_count, DataType type, int root,
                                        const CallOptions& options) {
  return CallAsync(chorus_scatterv_async, options, send, counts, displs, recv, recv_count, type,
                   root);
}

inline Status Communicator::AllToAll(const void* send, void* recv, size_t count, DataType type,
                                     const CallOptions& options) {
  return CallBlocking(chorus_alltoall, options, send, recv, count, type);
}
inline Work Communicator::AllToAllAsync(const void* send, void* recv, size_t count, DataType type,
                                        const CallOptions& options) {
  return CallAsync(chorus_alltoall_async, options, send, recv, count, type);
}

inline Status Communicator::AllToAllV(const void* send, const std::vector<size_t>& send_counts,
                                      const std::vector<size_t>& send_displs, void* recv,
                                      const std::vector<size_t>& recv_counts,
                                      const std::vector<size_t>& recv_displs, DataType type,
                                      const CallOptions& options) {
  return CallBlocking(chorus_alltoallv, options, send, send_counts, send_displs, recv,
                      recv_counts, recv_displs, type);
}
inline Work Communicator::AllToAllVAsync(const void* send, const std::vector<size_t>& send_counts,
                                         const std::vector<size_t>& send_displs, void* recv,
                                         const std::vector<size_t>& recv_counts,
                                         const std::vector<size_t>& recv_displs, DataType type,
                                         const CallOptions& options) {
  return CallAsync(chorus_alltoallv_async, options, send, send_counts, send_displs, recv,
                   recv_counts, recv_displs, type);
}

inline Status Communicator::Barrier(const CallOptions& options) {
  return CallBlocking(chorus_barrier, options);
}
inline Work Communicator::BarrierAsync(const CallOptions& options) {
  return CallAsync(chorus_barrier_async, options);
}

inline Status Communicator::Send(const void* data, size_t count, DataType type, int peer,
                                 uint32_t tag, const CallOptions& options) {
  return CallBlocking(chorus_send, options, data, count, type, peer, tag);
}
inline Work Communicator::SendAsync(const void* data, size_t count, DataType type, int peer,
                                    uint32_t tag, const CallOptions& options) {
  return CallAsync(chorus_send_async, options, data, count, type, peer, tag);
}

inline Status Communicator::Recv(void* data, size_t count, DataType type, int peer, uint32_t tag,
                                 const CallOptions& options) {
  return CallBlocking(chorus_recv, options, data, count, type, peer, tag);
}
inline Work Communicator::RecvAsync(void* data, size_t count, DataType type, int peer, uint32_t tag,
                                    const CallOptions& options) {
  return CallAsync(chorus_recv_async, options, data, count, type, peer, tag);
}

inline StatusOr<int> Communicator::RecvFromAny(void* data, size_t count, DataType type,
                                               const std::vector<int>& peers, uint32_t tag,
                                               const CallOptions& options) {
  int from = -1;
  Status status = CallBlocking(chorus_recv_from_any, options, data, count, type, peers.data(),
                               peers.size(), tag, &from);
  if (!status.ok()) return status;
  return from;
}
inline Work Communicator::RecvFromAnyAsync(void* data, size_t count, DataType type,
                                           const std::vector<int>& peers, uint32_t tag,
                                           const CallOptions& options) {
  return CallAsync(chorus_recv_from_any_async, options, data, count, type, peers.data(),
                   peers.size(), tag);
}

}  // namespace v0
}  // namespace chorus

#endif  // CHORUS_DETAIL_COMMUNICATOR_INL_H_
