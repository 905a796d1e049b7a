// Other processes' exported device memory, mapped into this one (cudaIpcOpenMemHandle for
// CUDA) once and shared by every call that reads or writes it.
//
// A mapping is in use from the Acquire that returns it until the matching Release: a caller
// releases only once the work it queued on the memory has finished. Mappings in use are never
// closed. Of the others, the least recently used are closed whenever more than `capacity`
// mappings are open; while every open mapping is in use, the cache grows past `capacity`
// rather than close one. The destructor closes whatever is left open.
//
// Host code with no CUDA dependency: the runtime passes how to open and close a mapping.
// Thread-safe.
#ifndef CHORUS_CUDA_IPC_MAPPINGS_H_
#define CHORUS_CUDA_IPC_MAPPINGS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace chorus {

class IpcMappings {
 public:
  using Handle = std::array<uint8_t, 64>;
  // Unmaps what `open` mapped (the base address it returned, on its device).
  using Close = std::function<void(void* base, int device)>;

  IpcMappings(size_t capacity, Close close) : capacity_(capacity), close_(std::move(close)) {}
  ~IpcMappings();
  IpcMappings(const IpcMappings&) = delete;
  IpcMappings& operator=(const IpcMappings&) = delete;

  // The base address of the mapping of `handle`, mapped on `device` by `open` unless it is
  // open already; in use until Release(handle). An error of `open` is returned as it is.
  absl::StatusOr<void*> Acquire(const Handle& handle, int device,
                                absl::FunctionRef<absl::StatusOr<void*>()> open);
  // One Acquire of `handle` is over.
  void Release(const Handle& handle);

  size_t open() const;
  size_t in_use() const;

 private:
  struct Mapping {
    void* base = nullptr;
    int device = -1;
    int users = 0;
    uint64_t last_use = 0;
  };
  // Closes unused mappings, least recently used first, while more than `keep` are open.
  void CloseUnusedBeyond(size_t keep);

  const size_t capacity_;
  const Close close_;
  mutable std::mutex mu_;
  std::map<Handle, Mapping> mappings_;
  uint64_t uses_ = 0;
};

}  // namespace chorus

#endif  // CHORUS_CUDA_IPC_MAPPINGS_H_
