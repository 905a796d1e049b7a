#include "chorus/transport/ibverbs/verbs_context.h"

#include <errno.h>
#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chorus/core/status.h"
#include "chorus/transport/ibverbs/verbs_library.h"
#include "chorus/transport/ibverbs/wire.h"

namespace chorus::ibverbs {
namespace {

const char* LinkLayerName(uint8_t link_layer) {
  switch (link_layer) {
    case IBV_LINK_LAYER_INFINIBAND:
      return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET:
      return "RoCE";
    default:
      return "unknown link layer";
  }
}

const char* GidTypeName(uint32_t type) {
  switch (type) {
    case IBV_GID_TYPE_IB:
      return "IB";
    case IBV_GID_TYPE_ROCE_V1:
      return "RoCE v1";
    case IBV_GID_TYPE_ROCE_V2:
      return "RoCE v2";
    default:
      return "?";
  }
}

bool IsIpv4Mapped(const uint8_t* gid) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid, kPrefix, sizeof(kPrefix)) == 0;
}

struct GidEntry {
  int index = 0;
  std::array<uint8_t, 16> gid{};
  uint32_t type = 0;
};

// The type of GID `index` ("RoCE v2", "IB/RoCE v1"), from sysfs: ibv_query_gid_ex is not
// reliable across providers and rdma-core versions, the sysfs file is.
uint32_t GidType(const std::string& device, int port, int index) {
  std::ifstream file(
      absl::StrCat("/sys/class/infiniband/", device, "/ports/", port, "/gid_attrs/types/", index));
  std::string type;
  std::getline(file, type);
  if (type == "RoCE v2") return IBV_GID_TYPE_ROCE_V2;
  if (absl::StrContains(type, "RoCE")) return IBV_GID_TYPE_ROCE_V1;
  return IBV_GID_TYPE_IB;
}

// The port's GIDs that are set (all-zero entries are empty), among the first kGidsLooked.
std::vector<GidEntry> ListGids(ibv_context* context, const std::string& device, int port,
                               int table_length) {
  constexpr int kGidsLooked = 128;
  std::vector<GidEntry> gids;
  for (int index = 0; index < std::min(table_length, kGidsLooked); ++index) {
    ibv_gid raw{};
    if (Verbs().query_gid(context, static_cast<uint8_t>(port), index, &raw) != 0) continue;
    GidEntry gid;
    gid.index = index;
    std::memcpy(gid.gid.data(), raw.raw, 16);
    if (gid.gid == std::array<uint8_t, 16>{}) continue;
    gid.type = GidType(device, port, index);
    gids.push_back(gid);
  }
  return gids;
}

std::string DescribeGids(const std::vector<GidEntry>& gids) {
  if (gids.empty()) return "none";
  std::vector<std::string> parts;
  for (const GidEntry& gid : gids) {
    parts.push_back(
        absl::StrCat(gid.index, " ", GidToString(gid.gid), " (", GidTypeName(gid.type), ")"));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace

int FirstActivePort(ibv_context* context, const ibv_device_attr& attr) {
  for (int port = 1; port <= attr.phys_port_cnt; ++port) {
    ibv_port_attr port_attr{};
    if (Verbs().QueryPort(context, static_cast<uint8_t>(port), &port_attr) == 0 &&
        port_attr.state == IBV_PORT_ACTIVE) {
      return port;
    }
  }
  return 0;
}

int MtuBytes(ibv_mtu mtu) {
  switch (mtu) {
    case IBV_MTU_256:
      return 256;
    case IBV_MTU_512:
      return 512;
    case IBV_MTU_1024:
      return 1024;
    case IBV_MTU_2048:
      return 2048;
    case IBV_MTU_4096:
      return 4096;
  }
  return 0;
}

ibv_mtu MtuFromBytes(int bytes) {
  switch (bytes) {
    case 512:
      return IBV_MTU_512;
    case 1024:
      return IBV_MTU_1024;
    case 2048:
      return IBV_MTU_2048;
    case 4096:
      return IBV_MTU_4096;
    default:
      return IBV_MTU_256;
  }
}

absl::StatusOr<std::unique_ptr<VerbsContext>> VerbsContext::Open(
    const VerbsDeviceOptions& options) {
  CHORUS_ASSIGN_OR_RETURN(const VerbsLibrary* verbs, LoadVerbsLibrary());
  int count = 0;
  ibv_device** list = verbs->get_device_list(&count);
  if (list == nullptr || count == 0) {
    if (list != nullptr) verbs->free_device_list(list);
    return PeerUnavailableError(
        "ibverbs: no RDMA device found (ibv_get_device_list lists none): load the driver of "
        "the adapter (rdma_rxe for Soft-RoCE: `rdma link add rxe0 type rxe netdev eth0`), or "
        "choose another transport (CHORUS_TRANSPORT=tcp)");
  }
  std::unique_ptr<VerbsContext> self(new VerbsContext());
  std::vector<std::string> names;
  std::vector<std::string> inactive;
  for (int i = 0; i < count && self->context_ == nullptr; ++i) {
    const std::string name = verbs->get_device_name(list[i]);
    names.push_back(name);
    if (!options.device.empty() && name != options.device) continue;
    ibv_context* context = verbs->open_device(list[i]);
    if (context == nullptr) {
      inactive.push_back(absl::StrCat(name, " (cannot be opened: ", std::strerror(errno), ")"));
      continue;
    }
    ibv_device_attr attr{};
    if (verbs->query_device(context, &attr) != 0) {
      inactive.push_back(absl::StrCat(name, " (ibv_query_device failed)"));
      verbs->close_device(context);
      continue;
    }
    int port = options.port;
    if (port == 0) port = FirstActivePort(context, attr);
    if (port == 0) {
      inactive.push_back(absl::StrCat(name, " (no active port)"));
      verbs->close_device(context);
      continue;
    }
    self->context_ = context;
    self->device_attr_ = attr;
    self->name_ = name;
    self->port_ = port;
  }
  verbs->free_device_list(list);
  if (self->context_ == nullptr) {
    if (!options.device.empty() && inactive.empty()) {
      return InvalidArgumentError(absl::StrCat("CHORUS_IB_DEVICE=", options.device,
                                               ": no such RDMA device; found ",
                                               absl::StrJoin(names, ", ")));
    }
    return PeerUnavailableError(
        absl::StrCat("ibverbs: no RDMA device with an active port: ", absl::StrJoin(inactive, "; "),
                     "; check the links with `ibv_devinfo`, or choose another transport "
                     "(CHORUS_TRANSPORT=tcp)"));
  }
  if (self->port_ > self->device_attr_.phys_port_cnt) {
    return InvalidArgumentError(absl::StrCat("CHORUS_IB_PORT=", self->port_, ": ", self->name_,
                                             " has ports 1 to ",
                                             int{self->device_attr_.phys_port_cnt}));
  }
  ibv_port_attr port_attr{};
  if (verbs->QueryPort(self->context_, static_cast<uint8_t>(self->port_), &port_attr) != 0) {
    return InternalError(absl::StrCat("ibverbs: ibv_query_port(", self->name_, ", ", self->port_,
                                      ") failed: ", std::strerror(errno)));
  }
  if (port_attr.state != IBV_PORT_ACTIVE) {
    return PeerUnavailableError(absl::StrCat("ibverbs: ", self->name_, " port ", self->port_,
                                             " is ", verbs->port_state_str(port_attr.state),
                                             ", not ACTIVE; check its link with `ibv_devinfo -d ",
                                             self->name_, "`"));
  }
  self->link_layer_ = port_attr.link_layer;
  self->lid_ = port_attr.lid;
  self->mtu_bytes_ = MtuBytes(port_attr.active_mtu);
  if (options.mtu != 0) {
    if (MtuBytes(MtuFromBytes(options.mtu)) != options.mtu) {
      return InvalidArgumentError(absl::StrCat("CHORUS_IB_MTU=", options.mtu,
                                               " is not a path MTU (256, 512, 1024, 2048, 4096)"));
    }
    if (options.mtu > self->mtu_bytes_) {
      return InvalidArgumentError(
          absl::StrCat("CHORUS_IB_MTU=", options.mtu, " exceeds the active MTU of ", self->name_,
                       " port ", self->port_, " (", self->mtu_bytes_,
                       "): a queue pair with a larger path MTU drops every packet; use at most ",
                       self->mtu_bytes_, " or raise the link's MTU"));
    }
    self->mtu_bytes_ = options.mtu;
  }
  const std::vector<GidEntry> gids =
      ListGids(self->context_, self->name_, self->port_, port_attr.gid_tbl_len);
  const GidEntry* chosen = nullptr;
  if (options.gid_index >= 0) {
    for (const GidEntry& gid : gids) {
      if (gid.index == options.gid_index) chosen = &gid;
    }
    if (chosen == nullptr) {
      return InvalidArgumentError(
          absl::StrCat("CHORUS_IB_GID_INDEX=", options.gid_index, ": ", self->name_, " port ",
                       self->port_, " has no GID there; its GIDs: ", DescribeGids(gids)));
    }
  } else if (self->link_layer_ == IBV_LINK_LAYER_ETHERNET) {
    for (const GidEntry& gid : gids) {
      if (chosen == nullptr && gid.type == IBV_GID_TYPE_ROCE_V2 && IsIpv4Mapped(gid.gid.data())) {
        chosen = &gid;
      }
    }
    if (chosen == nullptr) {
      return InvalidArgumentError(absl::StrCat(
          "ibverbs: ", self->name_, " port ", self->port_,
          " has no RoCE v2 GID with an IPv4 address (give its interface an IPv4 address, or "
          "name a GID with CHORUS_IB_GID_INDEX); its GIDs: ",
          DescribeGids(gids)));
    }
  } else if (!gids.empty()) {
    chosen = &gids.front();
  }
  if (chosen == nullptr) {
    return InvalidArgumentError(
        absl::StrCat("ibverbs: ", self->name_, " port ", self->port_, " has no GID"));
  }
  self->gid_index_ = chosen->index;
  self->gid_ = chosen->gid;

  self->pd_ = verbs->alloc_pd(self->context_);
  if (self->pd_ == nullptr) {
    return InternalError(
        absl::StrCat("ibverbs: ibv_alloc_pd on ", self->name_, " failed: ", std::strerror(errno)));
  }
  self->channel_ = verbs->create_comp_channel(self->context_);
  if (self->channel_ == nullptr) {
    return InternalError(absl::StrCat("ibverbs: ibv_create_comp_channel on ", self->name_,
                                      " failed: ", std::strerror(errno)));
  }
  const int flags = fcntl(self->channel_->fd, F_GETFL);
  fcntl(self->channel_->fd, F_SETFL, flags | O_NONBLOCK);
  const int cq_entries = std::min(kCqEntries, self->device_attr_.max_cqe);
  self->cq_ = verbs->create_cq(self->context_, cq_entries, nullptr, self->channel_, 0);
  if (self->cq_ == nullptr) {
    return InternalError(absl::StrCat("ibverbs: ibv_create_cq(", cq_entries, ") on ", self->name_,
                                      " failed: ", std::strerror(errno)));
  }
  const int async_flags = fcntl(self->context_->async_fd, F_GETFL);
  fcntl(self->context_->async_fd, F_SETFL, async_flags | O_NONBLOCK);
  return self;
}

VerbsContext::~VerbsContext() {
  if (cq_ != nullptr) Verbs().destroy_cq(cq_);
  if (channel_ != nullptr) Verbs().destroy_comp_channel(channel_);
  if (pd_ != nullptr) Verbs().dealloc_pd(pd_);
  if (context_ != nullptr) Verbs().close_device(context_);
}

std::string VerbsContext::Describe() const {
  return absl::StrCat(name_, " port ", port_, " (", LinkLayerName(link_layer_), ", GID ",
                      gid_index_, " ", GidToString(gid_), ", MTU ", mtu_bytes_, ")");
}

absl::StatusOr<MemoryRegion> VerbsContext::Register(uintptr_t start, size_t bytes) {
  return RegisterWith(start, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
}

absl::StatusOr<MemoryRegion> VerbsContext::RegisterSlots(uintptr_t start, size_t bytes) {
  return RegisterWith(start, bytes,
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
}

absl::StatusOr<MemoryRegion> VerbsContext::RegisterWith(uintptr_t start, size_t bytes, int access) {
  ibv_mr* mr = Verbs().reg_mr(pd_, reinterpret_cast<void*>(start), bytes, access);
  if (mr == nullptr) {
    const int error = errno;
    return InternalError(absl::StrCat(
        "ibverbs: ibv_reg_mr of ", bytes, " bytes on ", name_, " failed: ", std::strerror(error),
        error == ENOMEM || error == EPERM
            ? " (the locked-memory limit, `ulimit -l`, may be too low)"
            : ""));
  }
  MemoryRegion region;
  region.handle = mr;
  region.start = start;
  region.bytes = bytes;
  region.lkey = mr->lkey;
  region.rkey = mr->rkey;
  return region;
}

void VerbsContext::Deregister(const MemoryRegion& region) {
  Verbs().dereg_mr(static_cast<ibv_mr*>(region.handle));
}

}  // namespace chorus::ibverbs
