// A transport endpoint of this process. One device serves any number of communicators (for TCP
// it is one listening socket), so create one per process and share it.
//
//   chorus::StatusOr<chorus::Device> device = chorus::Device::Create();  // CHORUS_TRANSPORT
//
// Thread-safety: may be shared by communicators on many threads. Move-only.
#ifndef CHORUS_DEVICE_H_
#define CHORUS_DEVICE_H_

#include <string>

#include "chorus/chorus_c.h"
#include "chorus/detail/c_call.h"
#include "chorus/status.h"

namespace chorus {
inline namespace v0 {

class Device {
 public:
  // `transport`: "auto" (shared memory within a host, TCP between hosts), "tcp" or "shm"; empty
  // reads CHORUS_TRANSPORT (default "auto"). Every rank of a job must choose the same.
  static StatusOr<Device> Create(const std::string& transport = "") {
    chorus_device_t* handle = nullptr;
    Status status = detail::FromC(chorus_device_create(transport.c_str(), &handle));
    if (!status.ok()) return status;
    return Device(handle);
  }

  // The C handle, for mixing with the C API; owned by this Device.
  chorus_device_t* c_handle() const { return handle_.get(); }

 private:
  explicit Device(chorus_device_t* handle) : handle_(handle) {}
  detail::Handle<chorus_device_t, chorus_device_destroy> handle_;
};

}  // namespace v0
}  // namespace chorus

#endif  // CHORUS_DEVICE_H_
