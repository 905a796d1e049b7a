// An opened RDMA device: the verbs context, one protection domain, one completion channel and
// one completion queue shared by every queue pair of the process's verbs device, and the port
// and GID chosen for it. Opening checks what a queue pair will rely on (the port is active, the
// GID exists, the MTU fits the port) and fails with an error naming what it found, instead of
// a queue pair that later drops every packet without a word.
#ifndef CHORUS_TRANSPORT_IBVERBS_VERBS_CONTEXT_H_
#define CHORUS_TRANSPORT_IBVERBS_VERBS_CONTEXT_H_

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "chorus/transport/ibverbs/registration_cache.h"
#include "chorus/transport/ibverbs/verbs_options.h"

namespace chorus::ibverbs {

// Page-aligned memory for what a device registers itself (eager slots, bounce buffers).
struct FreeDeleter {
  void operator()(uint8_t* data) const { std::free(data); }
};
using AlignedBytes = std::unique_ptr<uint8_t, FreeDeleter>;
inline AlignedBytes AllocateAligned(size_t bytes) {
  constexpr size_t kPage = 4096;
  return AlignedBytes(
      static_cast<uint8_t*>(std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage)));
}

// The largest path MTU in bytes for an ibv_mtu, and back; 0 / IBV_MTU_256 for anything else.
int MtuBytes(ibv_mtu mtu);
ibv_mtu MtuFromBytes(int bytes);

// The first active port of an opened device, or 0 (the verbs library is loaded).
int FirstActivePort(ibv_context* context, const ibv_device_attr& attr);

class VerbsContext : public Registrar {
 public:
  // Completion-queue entries; every queue pair's send and receive work shares it.
  static constexpr int kCqEntries = 16384;

  static absl::StatusOr<std::unique_ptr<VerbsContext>> Open(const VerbsDeviceOptions& options);
  ~VerbsContext() override;
  VerbsContext(const VerbsContext&) = delete;
  VerbsContext& operator=(const VerbsContext&) = delete;

  ibv_context* context() const { return context_; }
  ibv_pd* pd() const { return pd_; }
  ibv_comp_channel* channel() const { return channel_; }
  ibv_cq* cq() const { return cq_; }
  const ibv_device_attr& device_attr() const { return device_attr_; }

  const std::string& name() const { return name_; }
  int port() const { return port_; }
  int gid_index() const { return gid_index_; }
  const std::array<uint8_t, 16>& gid() const { return gid_; }
  uint16_t lid() const { return lid_; }
  uint8_t link_layer() const { return link_layer_; }
  int mtu_bytes() const { return mtu_bytes_; }
  // "rxe0 port 1 (RoCE, GID 1 ::ffff:10.11.0.1, MTU 1024)".
  std::string Describe() const;

  // Registrar, for user buffers and bounce buffers: ibv_reg_mr with local write (RDMA reads
  // land there) and remote read (peers read announced sends), never remote write.
  absl::StatusOr<MemoryRegion> Register(uintptr_t start, size_t bytes) override;
  // For a connection's eager slots, which peers write into: remote write too.
  absl::StatusOr<MemoryRegion> RegisterSlots(uintptr_t start, size_t bytes);
  void Deregister(const MemoryRegion& region) override;

 private:
  VerbsContext() = default;
  absl::StatusOr<MemoryRegion> RegisterWith(uintptr_t start, size_t bytes, int access);

  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_device_attr device_attr_{};
  std::string name_;
  int port_ = 0;
  int gid_index_ = 0;
  std::array<uint8_t, 16> gid_{};
  uint16_t lid_ = 0;
  uint8_t link_layer_ = 0;
  int mtu_bytes_ = 0;
};

}  // namespace chorus::ibverbs

#endif  // CHORUS_TRANSPORT_IBVERBS_VERBS_CONTEXT_H_
