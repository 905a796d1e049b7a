// libibverbs, loaded when the verbs transport is first asked for (dlopen) instead of linked, so
// that the library and the programs built on it load and run on machines without rdma-core;
// only a verbs device needs it. Each function is looked up at the symbol version that the
// headers compile against (IBVERBS_1.1, or 1.0 for the two functions that have no other):
// plain dlsym would return the oldest version of some, which take the 1.0 ABI's structures.
// ibv_post_send, ibv_post_recv, ibv_poll_cq and ibv_req_notify_cq are inline in the headers
// (they call the provider through the context) and need no lookup.
#ifndef CHORUS_TRANSPORT_IBVERBS_VERBS_LIBRARY_H_
#define CHORUS_TRANSPORT_IBVERBS_VERBS_LIBRARY_H_

#include <infiniband/verbs.h>

#include "absl/status/statusor.h"

namespace chorus::ibverbs {

struct VerbsLibrary {
  decltype(&::ibv_get_device_list) get_device_list;
  decltype(&::ibv_free_device_list) free_device_list;
  decltype(&::ibv_get_device_name) get_device_name;
  decltype(&::ibv_open_device) open_device;
  decltype(&::ibv_close_device) close_device;
  decltype(&::ibv_query_device) query_device;
  // The library's entry, which takes the older, shorter port structure: call QueryPort().
  decltype(&::ibv_query_port) query_port_entry;
  decltype(&::ibv_query_gid) query_gid;
  decltype(&::ibv_port_state_str) port_state_str;
  decltype(&::ibv_alloc_pd) alloc_pd;
  decltype(&::ibv_dealloc_pd) dealloc_pd;
  decltype(&::ibv_create_comp_channel) create_comp_channel;
  decltype(&::ibv_destroy_comp_channel) destroy_comp_channel;
  decltype(&::ibv_create_cq) create_cq;
  decltype(&::ibv_destroy_cq) destroy_cq;
  decltype(&::ibv_resize_cq) resize_cq;
  decltype(&::ibv_get_cq_event) get_cq_event;
  decltype(&::ibv_ack_cq_events) ack_cq_events;
  decltype(&::ibv_create_qp) create_qp;
  decltype(&::ibv_modify_qp) modify_qp;
  decltype(&::ibv_destroy_qp) destroy_qp;
  decltype(&::ibv_reg_mr) reg_mr;
  decltype(&::ibv_dereg_mr) dereg_mr;
  decltype(&::ibv_get_async_event) get_async_event;
  decltype(&::ibv_ack_async_event) ack_async_event;
  decltype(&::ibv_event_type_str) event_type_str;
  decltype(&::ibv_wc_status_str) wc_status_str;

  // ibv_query_port as the headers' inline wrapper does it: the provider's own entry when the
  // context has one (it fills the whole structure), else the library's.
  int QueryPort(ibv_context* context, uint8_t port, ibv_port_attr* attr) const;
};

// Loads libibverbs.so.1 once per process; later calls return the same result. The error says
// what failed (the library is not installed, or lacks a function) and what to do.
absl::StatusOr<const VerbsLibrary*> LoadVerbsLibrary();

// The loaded library. Only for code that runs on an opened device (which loaded it).
const VerbsLibrary& Verbs();

}  // namespace chorus::ibverbs

#endif  // CHORUS_TRANSPORT_IBVERBS_VERBS_LIBRARY_H_
