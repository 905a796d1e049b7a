#include "chorus/transport/ibverbs/verbs_library.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"

namespace chorus::ibverbs {
namespace {

constexpr char kLibraryName[] = "libibverbs.so.1";

std::atomic<const VerbsLibrary*> loaded{nullptr};

template <typename Function>
bool Find(void* handle, const char* name, const char* version, Function* function,
          std::string* missing) {
  void* symbol = dlvsym(handle, name, version);
  if (symbol == nullptr) {
    if (!missing->empty()) missing->append(", ");
    absl::StrAppend(missing, name, "@", version);
    return false;
  }
  *function = reinterpret_cast<Function>(symbol);
  return true;
}

absl::StatusOr<const VerbsLibrary*> Load() {
  void* handle = dlopen(kLibraryName, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return PeerUnavailableError(absl::StrCat(
        "ibverbs: cannot load ", kLibraryName, " (", why != nullptr ? why : "not found",
        "): install rdma-core's verbs library and the adapter's provider (Debian: libibverbs1 "
        "and ibverbs-providers), or choose another transport (CHORUS_TRANSPORT=tcp)"));
  }
  auto library = std::make_unique<VerbsLibrary>();
  std::string missing;
  constexpr const char* k11 = "IBVERBS_1.1";
  Find(handle, "ibv_get_device_list", k11, &library->get_device_list, &missing);
  Find(handle, "ibv_free_device_list", k11, &library->free_device_list, &missing);
  Find(handle, "ibv_get_device_name", k11, &library->get_device_name, &missing);
  Find(handle, "ibv_open_device", k11, &library->open_device, &missing);
  Find(handle, "ibv_close_device", k11, &library->close_device, &missing);
  Find(handle, "ibv_query_device", k11, &library->query_device, &missing);
  Find(handle, "ibv_query_port", k11, &library->query_port_entry, &missing);
  Find(handle, "ibv_query_gid", k11, &library->query_gid, &missing);
  Find(handle, "ibv_port_state_str", k11, &library->port_state_str, &missing);
  Find(handle, "ibv_alloc_pd", k11, &library->alloc_pd, &missing);
  Find(handle, "ibv_dealloc_pd", k11, &library->dealloc_pd, &missing);
  Find(handle, "ibv_create_comp_channel", "IBVERBS_1.0", &library->create_comp_channel, &missing);
  Find(handle, "ibv_destroy_comp_channel", "IBVERBS_1.0", &library->destroy_comp_channel, &missing);
  Find(handle, "ibv_create_cq", k11, &library->create_cq, &missing);
  Find(handle, "ibv_destroy_cq", k11, &library->destroy_cq, &missing);
  Find(handle, "ibv_resize_cq", k11, &library->resize_cq, &missing);
  Find(handle, "ibv_get_cq_event", k11, &library->get_cq_event, &missing);
  Find(handle, "ibv_ack_cq_events", k11, &library->ack_cq_events, &missing);
  Find(handle, "ibv_create_qp", k11, &library->create_qp, &missing);
  Find(handle, "ibv_modify_qp", k11, &library->modify_qp, &missing);
  Find(handle, "ibv_destroy_qp", k11, &library->destroy_qp, &missing);
  Find(handle, "ibv_reg_mr", k11, &library->reg_mr, &missing);
  Find(handle, "ibv_dereg_mr", k11, &library->dereg_mr, &missing);
  Find(handle, "ibv_get_async_event", k11, &library->get_async_event, &missing);
  Find(handle, "ibv_ack_async_event", k11, &library->ack_async_event, &missing);
  Find(handle, "ibv_event_type_str", k11, &library->event_type_str, &missing);
  Find(handle, "ibv_wc_status_str", k11, &library->wc_status_str, &missing);
  if (!missing.empty()) {
    dlclose(handle);
    return PeerUnavailableError(
        absl::StrCat("ibverbs: ", kLibraryName, " lacks ", missing,
                     ": it is older than the verbs transport needs; install a current "
                     "rdma-core, or choose another transport (CHORUS_TRANSPORT=tcp)"));
  }
  // Kept loaded for the life of the process: devices and their threads may outlive any owner.
  return library.release();
}

}  // namespace

int VerbsLibrary::QueryPort(ibv_context* context, uint8_t port, ibv_port_attr* attr) const {
  verbs_context* extended = verbs_get_ctx_op(context, query_port);
  if (extended != nullptr) return extended->query_port(context, port, attr, sizeof(*attr));
  std::memset(attr, 0, sizeof(*attr));
  return query_port_entry(context, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
}

absl::StatusOr<const VerbsLibrary*> LoadVerbsLibrary() {
  static const absl::StatusOr<const VerbsLibrary*>* result =
      new absl::StatusOr<const VerbsLibrary*>([] {
        absl::StatusOr<const VerbsLibrary*> library = Load();
        if (library.ok()) loaded.store(*library, std::memory_order_release);
        return library;
      }());
  return *result;
}

const VerbsLibrary& Verbs() {
  const VerbsLibrary* library = loaded.load(std::memory_order_acquire);
  if (library == nullptr) std::abort();  // a device opened without loading the library
  return *library;
}

}  // namespace chorus::ibverbs
