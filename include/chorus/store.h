// Where the ranks of a job find each other: a key-value store every rank can reach.
//
//   chorus::StatusOr<chorus::Store> store = chorus::Store::Open("file:///shared/job42");
//
// Thread-safety: one Store may serve many communicators and threads at once. Move-only.
#ifndef CHORUS_STORE_H_
#define CHORUS_STORE_H_

#include <string>

#include "chorus/chorus_c.h"
#include "chorus/detail/c_call.h"
#include "chorus/status.h"

namespace chorus {
inline namespace v0 {

class Store {
 public:
  // Opens a store by URL: "file:///abs/dir" (a directory every rank can reach: local disk for
  // one host, NFS or similar for many), "redis://[[user]:password@]host[:port][/prefix]" or
  // "tcp://host:port" (served by the process whose rank in the environment is 0). An empty URL
  // reads the environment: CHORUS_STORE, else MASTER_ADDR and MASTER_PORT (chorus_c.h).
  static StatusOr<Store> Open(const std::string& url) {
    chorus_store_t* handle = nullptr;
    Status status = detail::FromC(chorus_store_open(url.c_str(), &handle));
    if (!status.ok()) return status;
    return Store(handle);
  }

  // The C handle, for mixing with the C API; owned by this Store.
  chorus_store_t* c_handle() const { return handle_.get(); }

 private:
  explicit Store(chorus_store_t* handle) : handle_(handle) {}
  detail::Handle<chorus_store_t, chorus_store_destroy> handle_;
};

}  // namespace v0
}  // namespace chorus

#endif  // CHORUS_STORE_H_
