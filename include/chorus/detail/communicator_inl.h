// Implementation detail of the C++ API: Communicator's methods, inline over chorus_c.h so that
// libchorus exports only the C ABI. Not part of the contract; included by communicator.h.
#ifndef CHORUS_DETAIL_COMMUNICATOR_INL_H_
#define CHORUS_DETAIL_COMMUNICATOR_INL_H_

#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

#include "chorus/chorus_c.h"
#include "chorus/communicator.h"

namespace chorus {
inline namespace v0 {
namespace detail {

inline chorus_call_options_t ToC(const CallOptions& options) {
  chorus_call_options_t c_options = CHORUS_CALL_OPTIONS_INIT;
  c_options.timeout_seconds = options.timeout_seconds;
  c_options.algorithm = options.algorithm.empty() ? nullptr : options.algorithm.c_str();
  return c_options;
}
inline chorus_datatype_t Type(DataType type) { return static_cast<chorus_datatype_t>(type); }
inline chorus_reduce_op_t Op(ReduceOp op) { return static_cast<chorus_reduce_op_t>(op); }
// Per-rank arrays go to C as pointers to size() entries; an empty one as null ("not used").
inline const size_t* Data(const std::vector<size_t>& values) {
  return values.empty() ? nullptr : values.data();
}
// Every per-rank array is empty or has one entry per rank: C reads size() entries.
inline Status CheckPerRank(std::initializer_list<const std::vector<size_t>*> arrays, int size) {
  for (const std::vector<size_t>* array : arrays) {
    if (!array->empty() && array->size() != static_cast<size_t>(size)) {
      return Status(ErrorKind::kInvalidArgument,
                    "a per-rank array has " + std::to_string(array->size()) +
                        " entries; the communicator has " + std::to_string(size) + " ranks");
    }
  }
  return Status();
}

}  // namespace detail

inline StatusOr<Communicator> Communicator::Create(Store& store, const std::string& name,
                                                   Device& device, int rank, int size,
                                                   const CommunicatorOptions& options) {
  chorus_comm_options_t c_options = CHORUS_COMM_OPTIONS_INIT;
  c_options.timeout_seconds = options.timeout_seconds;
  c_options.connect_timeout_seconds = options.connect_timeout_seconds;
  c_options.worker_threads = options.worker_threads;
  c_options.algorithm_rules =
      options.algorithm_rules.empty() ? nullptr : options.algorithm_rules.c_str();
  chorus_comm_t* handle = nullptr;
  Status status = detail::FromC(chorus_comm_create(
      store.c_handle(), name.c_str(), device.c_handle(), rank, size, &c_options, &handle));
  if (!status.ok()) return status;
  return Communicator(handle);
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

inline Status Communicator::AllReduce(const void* send, void* recv, size_t count, DataType type,
                                      ReduceOp op, const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  return detail::FromC(chorus_allreduce(handle_.get(), send, recv, count, detail::Type(type),
                                        detail::Op(op), &c_options));
}
inline Work Communicator::AllReduceAsync(const void* send, void* recv, size_t count, DataType type,
                                         ReduceOp op, const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  chorus_work_t* work = nullptr;
  const chorus_error_t code = chorus_allreduce_async(
      handle_.get(), send, recv, count, detail::Type(type), detail::Op(op), &c_options, &work);
  return Work(code == CHORUS_OK ? work : nullptr, detail::FromC(code));
}

inline Status Communicator::Broadcast(const void* send, void* recv, size_t count, DataType type,
                                      int root, const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  return detail::FromC(
      chorus_broadcast(handle_.get(), send, recv, count, detail::Type(type), root, &c_options));
}
inline Work Communicator::BroadcastAsync(const void* send, void* recv, size_t count, DataType type,
                                         int root, const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  chorus_work_t* work = nullptr;
  const chorus_error_t code = chorus_broadcast_async(handle_.get(), send, recv, count,
                                                     detail::Type(type), root, &c_options, &work);
  return Work(code == CHORUS_OK ? work : nullptr, detail::FromC(code));
}

inline Status Communicator::Reduce(const void* send, void* recv, size_t count, DataType type,
                                   ReduceOp op, int root, const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  return detail::FromC(chorus_reduce(handle_.get(), send, recv, count, detail::Type(type),
                                     detail::Op(op), root, &c_options));
}
inline Work Communicator::ReduceAsync(const void* send, void* recv, size_t count, DataType type,
                                      ReduceOp op, int root, const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  chorus_work_t* work = nullptr;
  const chorus_error_t code =
      chorus_reduce_async(handle_.get(), send, recv, count, detail::Type(type), detail::Op(op),
                          root, &c_options, &work);
  return Work(code == CHORUS_OK ? work : nullptr, detail::FromC(code));
}

inline Status Communicator::AllGather(const void* send, void* recv, size_t count, DataType type,
                                      const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  return detail::FromC(
      chorus_allgather(handle_.get(), send, recv, count, detail::Type(type), &c_options));
}
inline Work Communicator::AllGatherAsync(const void* send, void* recv, size_t count, DataType type,
                                         const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  chorus_work_t* work = nullptr;
  const chorus_error_t code = chorus_allgather_async(handle_.get(), send, recv, count,
                                                     detail::Type(type), &c_options, &work);
  return Work(code == CHORUS_OK ? work : nullptr, detail::FromC(code));
}

inline Status Communicator::AllGatherV(const void* send, void* recv,
                                       const std::vector<size_t>& counts, DataType type,
                                       const CallOptions& options) {
  Status checked = detail::CheckPerRank({&counts}, size());
  if (!checked.ok()) return checked;
  const chorus_call_options_t c_options = detail::ToC(options);
  return detail::FromC(chorus_allgatherv(handle_.get(), send, recv, detail::Data(counts),
                                         detail::Type(type), &c_options));
}
inline Work Communicator::AllGatherVAsync(const void* send, void* recv,
                                          const std::vector<size_t>& counts, DataType type,
                                          const CallOptions& options) {
  Status checked = detail::CheckPerRank({&counts}, size());
  if (!checked.ok()) return Work(nullptr, checked);
  const chorus_call_options_t c_options = detail::ToC(options);
  chorus_work_t* work = nullptr;
  const chorus_error_t code = chorus_allgatherv_async(
      handle_.get(), send, recv, detail::Data(counts), detail::Type(type), &c_options, &work);
  return Work(code == CHORUS_OK ? work : nullptr, detail::FromC(code));
}

inline Status Communicator::ReduceScatter(const void* send, void* recv, size_t count, DataType type,
                                          ReduceOp op, const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  return detail::FromC(chorus_reduce_scatter(handle_.get(), send, recv, count, detail::Type(type),
                                             detail::Op(op), &c_options));
}
inline Work Communicator::ReduceScatterAsync(const void* send, void* recv, size_t count,
                                             DataType type, ReduceOp op,
                                             const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  chorus_work_t* work = nullptr;
  const chorus_error_t code = chorus_reduce_scatter_async(
      handle_.get(), send, recv, count, detail::Type(type), detail::Op(op), &c_options, &work);
  return Work(code == CHORUS_OK ? work : nullptr, detail::FromC(code));
}

inline Status Communicator::ReduceScatterV(const void* send, void* recv,
                                           const std::vector<size_t>& counts, DataType type,
                                           ReduceOp op, const CallOptions& options) {
  Status checked = detail::CheckPerRank({&counts}, size());
  if (!checked.ok()) return checked;
  const chorus_call_options_t c_options = detail::ToC(options);
  return detail::FromC(chorus_reduce_scatterv(handle_.get(), send, recv, detail::Data(counts),
                                              detail::Type(type), detail::Op(op), &c_options));
}
inline Work Communicator::ReduceScatterVAsync(const void* send, void* recv,
                                              const std::vector<size_t>& counts, DataType type,
                                              ReduceOp op, const CallOptions& options) {
  Status checked = detail::CheckPerRank({&counts}, size());
  if (!checked.ok()) return Work(nullptr, checked);
  const chorus_call_options_t c_options = detail::ToC(options);
  chorus_work_t* work = nullptr;
  const chorus_error_t code =
      chorus_reduce_scatterv_async(handle_.get(), send, recv, detail::Data(counts),
                                   detail::Type(type), detail::Op(op), &c_options, &work);
  return Work(code == CHORUS_OK ? work : nullptr, detail::FromC(code));
}

inline Status Communicator::Gather(const void* send, void* recv, size_t count, DataType type,
                                   int root, const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  return detail::FromC(
      chorus_gather(handle_.get(), send, recv, count, detail::Type(type), root, &c_options));
}
inline Work Communicator::GatherAsync(const void* send, void* recv, size_t count, DataType type,
                                      int root, const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  chorus_work_t* work = nullptr;
  const chorus_error_t code = chorus_gather_async(handle_.get(), send, recv, count,
                                                  detail::Type(type), root, &c_options, &work);
  return Work(code == CHORUS_OK ? work : nullptr, detail::FromC(code));
}

inline Status Communicator::GatherV(const void* send, size_t send_count, void* recv,
                                    const std::vector<size_t>& counts,
                                    const std::vector<size_t>& displs, DataType type, int root,
                                    const CallOptions& options) {
  Status checked = detail::CheckPerRank({&counts, &displs}, size());
  if (!checked.ok()) return checked;
  const chorus_call_options_t c_options = detail::ToC(options);
  return detail::FromC(chorus_gatherv(handle_.get(), send, send_count, recv, detail::Data(counts),
                                      detail::Data(displs), detail::Type(type), root, &c_options));
}
inline Work Communicator::GatherVAsync(const void* send, size_t send_count, void* recv,
                                       const std::vector<size_t>& counts,
                                       const std::vector<size_t>& displs, DataType type, int root,
                                       const CallOptions& options) {
  Status checked = detail::CheckPerRank({&counts, &displs}, size());
  if (!checked.ok()) return Work(nullptr, checked);
  const chorus_call_options_t c_options = detail::ToC(options);
  chorus_work_t* work = nullptr;
  const chorus_error_t code =
      chorus_gatherv_async(handle_.get(), send, send_count, recv, detail::Data(counts),
                           detail::Data(displs), detail::Type(type), root, &c_options, &work);
  return Work(code == CHORUS_OK ? work : nullptr, detail::FromC(code));
}

inline Status Communicator::Scatter(const void* send, void* recv, size_t count, DataType type,
                                    int root, const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  return detail::FromC(
      chorus_scatter(handle_.get(), send, recv, count, detail::Type(type), root, &c_options));
}
inline Work Communicator::ScatterAsync(const void* send, void* recv, size_t count, DataType type,
                                       int root, const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  chorus_work_t* work = nullptr;
  const chorus_error_t code = chorus_scatter_async(handle_.get(), send, recv, count,
                                                   detail::Type(type), root, &c_options, &work);
  return Work(code == CHORUS_OK ? work : nullptr, detail::FromC(code));
}

inline Status Communicator::ScatterV(const void* send, const std::vector<size_t>& counts,
                                     const std::vector<size_t>& displs, void* recv,
                                     size_t recv_count, DataType type, int root,
                                     const CallOptions& options) {
  Status checked = detail::CheckPerRank({&counts, &displs}, size());
  if (!checked.ok()) return checked;
  const chorus_call_options_t c_options = detail::ToC(options);
  return detail::FromC(chorus_scatterv(handle_.get(), send, detail::Data(counts),
                                       detail::Data(displs), recv, recv_count, detail::Type(type),
                                       root, &c_options));
}
inline Work Communicator::ScatterVAsync(const void* send, const std::vector<size_t>& counts,
                                        const std::vector<size_t>& displs, void* recv,
                                        size_t recv_count, DataType type, int root,
                                        const CallOptions& options) {
  Status checked = detail::CheckPerRank({&counts, &displs}, size());
  if (!checked.ok()) return Work(nullptr, checked);
  const chorus_call_options_t c_options = detail::ToC(options);
  chorus_work_t* work = nullptr;
  const chorus_error_t code =
      chorus_scatterv_async(handle_.get(), send, detail::Data(counts), detail::Data(displs), recv,
                            recv_count, detail::Type(type), root, &c_options, &work);
  return Work(code == CHORUS_OK ? work : nullptr, detail::FromC(code));
}

inline Status Communicator::AllToAll(const void* send, void* recv, size_t count, DataType type,
                                     const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  return detail::FromC(
      chorus_alltoall(handle_.get(), send, recv, count, detail::Type(type), &c_options));
}
inline Work Communicator::AllToAllAsync(const void* send, void* recv, size_t count, DataType type,
                                        const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  chorus_work_t* work = nullptr;
  const chorus_error_t code = chorus_alltoall_async(handle_.get(), send, recv, count,
                                                    detail::Type(type), &c_options, &work);
  return Work(code == CHORUS_OK ? work : nullptr, detail::FromC(code));
}

inline Status Communicator::AllToAllV(const void* send, const std::vector<size_t>& send_counts,
                                      const std::vector<size_t>& send_displs, void* recv,
                                      const std::vector<size_t>& recv_counts,
                                      const std::vector<size_t>& recv_displs, DataType type,
                                      const CallOptions& options) {
  Status checked =
      detail::CheckPerRank({&send_counts, &send_displs, &recv_counts, &recv_displs}, size());
  if (!checked.ok()) return checked;
  const chorus_call_options_t c_options = detail::ToC(options);
  return detail::FromC(chorus_alltoallv(handle_.get(), send, detail::Data(send_counts),
                                        detail::Data(send_displs), recv, detail::Data(recv_counts),
                                        detail::Data(recv_displs), detail::Type(type), &c_options));
}
inline Work Communicator::AllToAllVAsync(const void* send, const std::vector<size_t>& send_counts,
                                         const std::vector<size_t>& send_displs, void* recv,
                                         const std::vector<size_t>& recv_counts,
                                         const std::vector<size_t>& recv_displs, DataType type,
                                         const CallOptions& options) {
  Status checked =
      detail::CheckPerRank({&send_counts, &send_displs, &recv_counts, &recv_displs}, size());
  if (!checked.ok()) return Work(nullptr, checked);
  const chorus_call_options_t c_options = detail::ToC(options);
  chorus_work_t* work = nullptr;
  const chorus_error_t code = chorus_alltoallv_async(
      handle_.get(), send, detail::Data(send_counts), detail::Data(send_displs), recv,
      detail::Data(recv_counts), detail::Data(recv_displs), detail::Type(type), &c_options, &work);
  return Work(code == CHORUS_OK ? work : nullptr, detail::FromC(code));
}

inline Status Communicator::Barrier(const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  return detail::FromC(chorus_barrier(handle_.get(), &c_options));
}
inline Work Communicator::BarrierAsync(const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  chorus_work_t* work = nullptr;
  const chorus_error_t code = chorus_barrier_async(handle_.get(), &c_options, &work);
  return Work(code == CHORUS_OK ? work : nullptr, detail::FromC(code));
}

inline Status Communicator::Send(const void* data, size_t count, DataType type, int peer,
                                 uint32_t tag, const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  return detail::FromC(
      chorus_send(handle_.get(), data, count, detail::Type(type), peer, tag, &c_options));
}
inline Work Communicator::SendAsync(const void* data, size_t count, DataType type, int peer,
                                    uint32_t tag, const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  chorus_work_t* work = nullptr;
  const chorus_error_t code = chorus_send_async(handle_.get(), data, count, detail::Type(type),
                                                peer, tag, &c_options, &work);
  return Work(code == CHORUS_OK ? work : nullptr, detail::FromC(code));
}

inline Status Communicator::Recv(void* data, size_t count, DataType type, int peer, uint32_t tag,
                                 const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  return detail::FromC(
      chorus_recv(handle_.get(), data, count, detail::Type(type), peer, tag, &c_options));
}
inline Work Communicator::RecvAsync(void* data, size_t count, DataType type, int peer, uint32_t tag,
                                    const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  chorus_work_t* work = nullptr;
  const chorus_error_t code = chorus_recv_async(handle_.get(), data, count, detail::Type(type),
                                                peer, tag, &c_options, &work);
  return Work(code == CHORUS_OK ? work : nullptr, detail::FromC(code));
}

inline StatusOr<int> Communicator::RecvFromAny(void* data, size_t count, DataType type,
                                               const std::vector<int>& peers, uint32_t tag,
                                               const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  int from = -1;
  Status status =
      detail::FromC(chorus_recv_from_any(handle_.get(), data, count, detail::Type(type),
                                         peers.data(), peers.size(), tag, &from, &c_options));
  if (!status.ok()) return status;
  return from;
}
inline Work Communicator::RecvFromAnyAsync(void* data, size_t count, DataType type,
                                           const std::vector<int>& peers, uint32_t tag,
                                           const CallOptions& options) {
  const chorus_call_options_t c_options = detail::ToC(options);
  chorus_work_t* work = nullptr;
  const chorus_error_t code =
      chorus_recv_from_any_async(handle_.get(), data, count, detail::Type(type), peers.data(),
                                 peers.size(), tag, &c_options, &work);
  return Work(code == CHORUS_OK ? work : nullptr, detail::FromC(code));
}

}  // namespace v0
}  // namespace chorus

#endif  // CHORUS_DETAIL_COMMUNICATOR_INL_H_
