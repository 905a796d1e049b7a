#include "chorus/transport/ibverbs/verbs_connection.h"

#include <arpa/inet.h>
#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "chorus/core/host_identity.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"
#include "chorus/transport/ibverbs/verbs_library.h"
#include "chorus/transport/ibverbs/verbs_mesh.h"

namespace chorus::ibverbs {
namespace {

// Send work requests kept for credit reports and liveness probes, so that slot
// writes and reads never leave them without room.
constexpr uint32_t kControlReserve = 3;
// Receive work requests beyond the slots: the control writes the peer may have in flight.
constexpr uint32_t kControlReceives = 8;
constexpr uint32_t kWantedInline = 256;
// A liveness probe reads this much of the peer's ring into the end of this side's memory.
constexpr size_t kProbeBytes = 64;
// One RDMA read moves at most this much; several are in flight per connection.
constexpr uint64_t kReadChunk = uint64_t{1} << 20;
constexpr uint32_t kMaxReadDepth = 16;
// How long a cancel waits for RDMA reads into (or, for an announced send, from) its buffer
// before it gives up the connection (whose queue pair then serves and performs no more reads).
constexpr absl::Duration kCancelWait = absl::Seconds(5);

uint32_t AtLeastOne(int value) { return value < 1 ? 1u : static_cast<uint32_t>(value); }

absl::Status ModifyError(const char* state, int error, const std::string& label) {
  return InternalError(absl::StrCat("ibverbs: moving the queue pair to ", label, " to ", state,
                                    " failed: ", std::strerror(error)));
}

}  // namespace

uint32_t ResponderReadDepth(const VerbsContext& context) {
  return std::min(kMaxReadDepth, AtLeastOne(context.device_attr().max_qp_rd_atom));
}

VerbsConnection::VerbsConnection(VerbsMesh& mesh, int peer, uint32_t serial)
    : mesh_(mesh),
      engine_(mesh.engine()),
      context_(mesh.engine().context()),
      peer_(peer),
      serial_(serial),
      slots_(static_cast<uint32_t>(mesh.engine().options().slots)),
      slot_bytes_(mesh.engine().options().slot_bytes),
      label_(std::make_shared<const std::string>(absl::StrCat("rank ", peer))),
      credits_(static_cast<uint32_t>(mesh.engine().options().slots)),
      outbox_busy_(slots_, false),
      written_(slots_) {}

VerbsConnection::~VerbsConnection() {
  if (qp_ != nullptr) Verbs().destroy_qp(qp_);
  if (reserved_completions_ > 0) {
    std::lock_guard<std::mutex> lock(engine_.mu());
    engine_.ReleaseCompletions(reserved_completions_);
  }
  if (registered_) context_.Deregister(region_);
}

uint64_t VerbsConnection::WorkId(Op op, uint32_t value) const {
  return (uint64_t{serial_} << 32) | (static_cast<uint64_t>(op) << 24) | (value & 0xffffff);
}

absl::Status VerbsConnection::Create() {
  const size_t bytes = 2 * size_t{slots_} * slot_bytes_ + kProbeBytes;
  memory_ = AllocateAligned(bytes);
  if (memory_ == nullptr) return InternalError("ibverbs: out of memory for eager slots");
  std::memset(memory_.get(), 0, bytes);
  CHORUS_ASSIGN_OR_RETURN(
      region_, context_.RegisterSlots(reinterpret_cast<uintptr_t>(memory_.get()), bytes));
  registered_ = true;
  const ibv_device_attr& attr = context_.device_attr();
  read_depth_ = std::min(kMaxReadDepth, AtLeastOne(attr.max_qp_init_rd_atom));
  recv_depth_ = slots_ + kControlReceives;
  max_send_wr_ = slots_ + read_depth_ + kControlReserve;
  if (recv_depth_ > static_cast<uint32_t>(attr.max_qp_wr) ||
      max_send_wr_ > static_cast<uint32_t>(attr.max_qp_wr)) {
    return InvalidArgumentError(absl::StrCat(
        "CHORUS_IB_SLOTS=", slots_, " needs ", std::max(recv_depth_, max_send_wr_),
        " work requests per queue pair; ", context_.name(), " allows ", attr.max_qp_wr));
  }
  ibv_qp_init_attr init{};
  init.send_cq = context_.cq();
  init.recv_cq = context_.cq();
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = max_send_wr_;
  init.cap.max_recv_wr = recv_depth_;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.cap.max_inline_data = kWantedInline;
  qp_ = Verbs().create_qp(context_.pd(), &init);
  if (qp_ == nullptr) {
    init.cap.max_inline_data = 0;  // some devices take no inline data
    qp_ = Verbs().create_qp(context_.pd(), &init);
  }
  if (qp_ == nullptr) {
    return InternalError(absl::StrCat("ibverbs: ibv_create_qp on ", context_.name(),
                                      " failed: ", std::strerror(errno)));
  }
  max_inline_ = init.cap.max_inline_data;
  qp_num_ = qp_->qp_num;
  {
    std::lock_guard<std::mutex> lock(engine_.mu());
    CHORUS_RETURN_IF_ERROR(engine_.ReserveCompletions(max_send_wr_ + recv_depth_));
    reserved_completions_ = max_send_wr_ + recv_depth_;
  }
  CHORUS_RETURN_IF_ERROR(ModifyToInit());
  return PostReceives();
}

PeerEndpoint VerbsConnection::LocalEndpoint() const {
  PeerEndpoint endpoint;
  endpoint.qp_num = qp_->qp_num;
  endpoint.ring_address = reinterpret_cast<uint64_t>(memory_.get());
  endpoint.ring_rkey = region_.rkey;
  return endpoint;
}

absl::Status VerbsConnection::ModifyToInit() {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = static_cast<uint8_t>(context_.port());
  attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  const int error = Verbs().modify_qp(
      qp_, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  return error == 0 ? absl::OkStatus() : ModifyError("INIT", error, *label_);
}

absl::Status VerbsConnection::ModifyToRtr() {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = MtuFromBytes(path_mtu_bytes_);
  attr.dest_qp_num = remote_endpoint_.qp_num;
  attr.rq_psn = remote_.psn;
  attr.max_dest_rd_atomic = static_cast<uint8_t>(ResponderReadDepth(context_));
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = static_cast<uint8_t>(context_.port());
  attr.ah_attr.dlid = remote_.lid;
  if (remote_.link_layer == IBV_LINK_LAYER_ETHERNET || remote_.lid == 0) {
    // RoCE has no LIDs: packets are routed by the GID in a global route header.
    attr.ah_attr.is_global = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, remote_.gid.data(), 16);
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(context_.gid_index());
    attr.ah_attr.grh.hop_limit = 64;
  }
  const int error =
      Verbs().modify_qp(qp_, &attr,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  return error == 0 ? absl::OkStatus() : ModifyError("RTR", error, *label_);
}

absl::Status VerbsConnection::ModifyToRts() {
  const VerbsDeviceOptions& options = engine_.options();
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = static_cast<uint8_t>(options.ack_timeout);
  attr.retry_cnt = static_cast<uint8_t>(options.retry_count);
  // Receive work requests always outnumber what the peer may send, so receiver-not-ready
  // means a broken peer: fail after a few retries instead of retrying forever.
  attr.rnr_retry = 3;
  attr.sq_psn = local_psn_;
  attr.max_rd_atomic = static_cast<uint8_t>(read_depth_);
  const int error =
      Verbs().modify_qp(qp_, &attr,
                        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                            IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  return error == 0 ? absl::OkStatus() : ModifyError("RTS", error, *label_);
}

int VerbsConnection::PostOneReceive() {
  ibv_recv_wr wr{};
  wr.wr_id = WorkId(Op::kRecv, 0);
  wr.num_sge = 0;
  ibv_recv_wr* bad = nullptr;
  if (qp_ == nullptr) return EINVAL;  // destroyed by Fail()
  return ibv_post_recv(qp_, &wr, &bad);
}

absl::Status VerbsConnection::PostReceives() {
  for (uint32_t i = 0; i < recv_depth_; ++i) {
    const int error = PostOneReceive();
    if (error != 0) {
      return InternalError(
          absl::StrCat("ibverbs: ibv_post_recv to ", *label_, " failed: ", std::strerror(error)));
    }
  }
  return absl::OkStatus();
}

absl::Status VerbsConnection::BringUp(const PublishedAddress& peer, uint32_t local_psn) {
  remote_ = peer;
  remote_endpoint_ = peer.endpoints[mesh_.rank()];
  local_psn_ = local_psn;
  path_mtu_bytes_ = std::min(context_.mtu_bytes(), static_cast<int>(peer.mtu_bytes));
  // No more reads in flight than the peer's queue pair answers at once.
  read_depth_ = std::min(read_depth_, AtLeastOne(static_cast<int>(peer.read_depth)));
  if (peer.host == LocalHostIdentity() && peer.pid != static_cast<uint32_t>(getpid())) {
    peer_pid_ = static_cast<pid_t>(peer.pid);
  }
  label_ = std::make_shared<const std::string>(
      absl::StrCat("rank ", peer_, " (", peer.device, " ", GidToString(peer.gid), ")"));
  CHORUS_RETURN_IF_ERROR(ModifyToRtr());
  return ModifyToRts();
}

void VerbsConnection::Attach() { engine_.Attach(qp_num_, serial_, this); }

absl::Status VerbsConnection::Start() {
  // An asynchronous event or an error completion may have failed it since it was attached.
  if (state_ == State::kFailed) return failure_;
  state_ = State::kUp;
  Pump();  // what was posted, and reads of messages announced, meanwhile
  return absl::OkStatus();
}

bool VerbsConnection::PostControl(Op op, ImmediateKind kind, uint32_t value) {
  if (send_wrs_in_flight_ >= max_send_wr_) return false;
  ibv_send_wr wr{};
  wr.wr_id = WorkId(op, value);
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(MakeImmediate(kind, value));
  wr.num_sge = 0;
  wr.wr.rdma.remote_addr = remote_endpoint_.ring_address;
  wr.wr.rdma.rkey = remote_endpoint_.ring_rkey;
  return PostSend(wr, "an empty write");
}

bool VerbsConnection::PostSend(ibv_send_wr& wr, absl::string_view what) {
  if (qp_ == nullptr) return false;  // destroyed by Fail()
  ibv_send_wr* bad = nullptr;
  const int error = ibv_post_send(qp_, &wr, &bad);
  if (error != 0) {
    Fail(Broken(absl::StrCat("ibv_post_send of ", what, " failed: ", std::strerror(error))));
    return false;
  }
  ++send_wrs_in_flight_;
  return true;
}

absl::Status VerbsConnection::Broken(absl::string_view what) const {
  return PeerUnavailableError(
      absl::StrCat("ibverbs: connection to ", *label_, " over ", context_.name(), " failed: ", what,
                   "; the peer process may have died or its link gone down: check that ", "rank ",
                   peer_, " still runs and that `ibv_devinfo` shows both ports ACTIVE"),
      peer_);
}

bool VerbsConnection::HasPendingWork() const {
  return !queue_.empty() || !announced_.empty() || !assembling_.empty() || !reads_.empty() ||
         !read_queue_.empty() || mesh_.matching().PostedCount(peer_) > 0 ||
         std::any_of(written_.begin(), written_.end(),
                     [](const std::shared_ptr<Outbound>& out) { return out != nullptr; });
}

// --- Posting ---

RequestPtr VerbsConnection::Send(Tag tag, ConstMemoryRef buffer) {
  auto request = std::make_shared<VerbsRequest>(RequestKind::kSend, peer_, tag, mesh_.engine_ptr());
  if (buffer.type != MemoryType::kHost) {
    request->Complete(InvalidArgumentError("the verbs transport sends host memory only"), 0);
    return request;
  }
  auto out = std::make_shared<Outbound>();
  out->request = request;
  out->tag = tag;
  out->data = static_cast<const uint8_t*>(buffer.data);
  out->size = buffer.size;
  out->kind = SlotKind::kData;
  if (buffer.size > slot_bytes_ - kSlotHeaderBytes) {
    // Registering takes long for large buffers: done before the engine's mutex is taken.
    absl::StatusOr<RegistrationCache::Lease> lease =
        engine_.registrations().Acquire(buffer.data, buffer.size);
    if (lease.ok()) {
      out->kind = SlotKind::kAnnounce;
      out->lease.emplace(*std::move(lease));
    } else {
      CHORUS_LOG(kWarn, "ibverbs") << "sending " << buffer.size << " bytes to " << *label_
                                   << " by copy: " << lease.status().message();
    }
  }
  std::lock_guard<std::mutex> lock(engine_.mu());
  if (!mesh_.aborted().ok()) {
    request->Complete(mesh_.aborted(), 0);
    return request;
  }
  if (state_ == State::kFailed) {
    request->Complete(failure_, 0);
    return request;
  }
  out->send_id = next_send_id_++;
  request->outbound = out;
  request->set_target(this);
  queue_.push_back(std::move(out));
  PumpSends();
  return request;
}

RequestPtr VerbsConnection::Recv(Tag tag, MemoryRef buffer) {
  auto request = std::make_shared<VerbsRequest>(RequestKind::kRecv, peer_, tag, mesh_.engine_ptr());
  if (buffer.type != MemoryType::kHost) {
    request->Complete(InvalidArgumentError("the verbs transport receives into host memory only"),
                      0);
    return request;
  }
  auto slot = std::make_shared<RecvSlot>();
  slot->request = request;
  slot->data = static_cast<uint8_t*>(buffer.data);
  slot->capacity = buffer.size;
  slot->peers = {peer_};
  std::lock_guard<std::mutex> lock(engine_.mu());
  if (!mesh_.aborted().ok()) {
    request->Complete(mesh_.aborted(), 0);
    return request;
  }
  request->recv_slot = slot;
  request->set_target(this);
  if (mesh_.matching().OldestUnexpected(peer_, tag) != nullptr) {
    TakeUnexpected(tag, slot);
  } else if (state_ == State::kFailed) {
    request->Complete(failure_, 0, peer_);
  } else {
    mesh_.matching().Post(peer_, tag, slot);
  }
  return request;
}

void VerbsConnection::TakeUnexpected(Tag tag, const std::shared_ptr<RecvSlot>& slot) {
  std::optional<std::shared_ptr<Inbound>> inbound = mesh_.matching().PopUnexpected(peer_, tag);
  if (inbound.has_value()) Match(*inbound, slot);
}

// --- Sending ---

bool VerbsConnection::SendRoomFor(int writes) const {
  return send_wrs_in_flight_ + static_cast<uint32_t>(writes) + kControlReserve <= max_send_wr_;
}

void VerbsConnection::Pump() {
  if (state_ != State::kUp) return;
  PumpReads();
  PumpSends();
}

void VerbsConnection::PumpSends() {
  if (state_ != State::kUp) return;
  while (!queue_.empty()) {
    const std::shared_ptr<Outbound> out = queue_.front();
    const uint32_t slot = credits_.NextSlot();
    if (!credits_.CanSend() || outbox_busy_[slot] || !SendRoomFor(1)) break;
    WriteSlot(*out, slot);
    if (state_ == State::kFailed) return;
    if (out->kind == SlotKind::kData && out->offset < out->size) continue;  // more fragments
    queue_.pop_front();
    if (out->kind == SlotKind::kAnnounce) {
      announced_[out->send_id] = out;
    } else if (out->request != nullptr) {
      // Copied into the outbox, but complete only once the peer's device has it: a process
      // that exits right after its sends complete must not take them with its queue pair.
      written_[slot] = out;
    }
  }
  if (credits_.OwesReport() && !credit_report_in_flight_ &&
      PostControl(Op::kCredits, ImmediateKind::kCredits, credits_.FreedCount())) {
    credits_.Reported();
    credit_report_in_flight_ = true;
  }
}

void VerbsConnection::WriteSlot(Outbound& out, uint32_t slot) {
  uint8_t* box = OutboxSlot(slot);
  SlotHeader header;
  header.kind = out.kind;
  header.credits = credits_.FreedCount();
  header.tag = out.tag;
  header.message_bytes = out.size;
  header.send_id = out.send_id;
  uint32_t payload = 0;
  if (out.kind == SlotKind::kData) {
    payload = static_cast<uint32_t>(
        std::min<uint64_t>(out.size - out.offset, slot_bytes_ - kSlotHeaderBytes));
    header.offset = out.offset;
    header.fragment_bytes = payload;
    if (payload > 0) std::memcpy(box + kSlotHeaderBytes, out.data + out.offset, payload);
  } else if (out.kind == SlotKind::kAnnounce) {
    header.address = reinterpret_cast<uint64_t>(out.data);
    header.rkey = out.lease->rkey();
  }
  std::memcpy(box, &header, kSlotHeaderBytes);
  const uint32_t bytes = static_cast<uint32_t>(kSlotHeaderBytes) + payload;
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uint64_t>(box);
  sge.length = bytes;
  sge.lkey = region_.lkey;
  ibv_send_wr wr{};
  wr.wr_id = WorkId(Op::kSlotWrite, slot);
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED | (bytes <= max_inline_ ? IBV_SEND_INLINE : 0);
  wr.imm_data = htonl(MakeImmediate(ImmediateKind::kSlot, slot));
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = remote_endpoint_.ring_address + uint64_t{slot} * slot_bytes_;
  wr.wr.rdma.rkey = remote_endpoint_.ring_rkey;
  if (!PostSend(wr, "a slot write")) return;
  credits_.Reported();
  credits_.Sent();
  outbox_busy_[slot] = true;
  out.offset += payload;
}

void VerbsConnection::QueueDone(Inbound& inbound) {
  if (inbound.done_sent) return;
  inbound.done_sent = true;
  auto out = std::make_shared<Outbound>();
  out->kind = SlotKind::kDone;
  out->send_id = inbound.send_id;
  queue_.push_back(std::move(out));
  PumpSends();
}

// --- Completions ---

void VerbsConnection::OnCompletion(const ibv_wc& completion) {
  if (state_ == State::kFailed) return;
  last_progress_ = absl::Now();
  const Op op = static_cast<Op>((completion.wr_id >> 24) & 0xff);
  const uint32_t value = completion.wr_id & 0xffffff;
  if (completion.status != IBV_WC_SUCCESS) {
    // A flushed request follows the failure that put the queue pair in error, whose own
    // completion says what went wrong.
    if (completion.status == IBV_WC_WR_FLUSH_ERR) return;
    Fail(Broken(absl::StrCat(Verbs().wc_status_str(completion.status), " (vendor error ",
                             completion.vendor_err, ")")));
    return;
  }
  switch (op) {
    case Op::kRecv:
      OnArrival(completion);
      return;
    case Op::kSlotWrite: {
      --send_wrs_in_flight_;
      outbox_busy_[value % slots_] = false;
      const std::shared_ptr<Outbound> out = std::move(written_[value % slots_]);
      if (out != nullptr) out->request->Complete(absl::OkStatus(), out->size);
      return;
    }
    case Op::kCredits:
      --send_wrs_in_flight_;
      credit_report_in_flight_ = false;
      return;
    case Op::kLiveness:
      --send_wrs_in_flight_;
      liveness_in_flight_ = false;
      return;
    case Op::kRead:
      --send_wrs_in_flight_;
      OnReadCompleted(value, true);
      return;
  }
}

void VerbsConnection::OnFatalEvent(const char* what) { Fail(Broken(what)); }

void VerbsConnection::OnTick(absl::Time now) {
  if (state_ == State::kUp && peer_pid_ > 0 && HasPendingWork() && !ProcessRunning(peer_pid_)) {
    // A peer on this host is watched through its process, which is exact and immediate.
    Fail(Broken(absl::StrCat("its process (pid ", peer_pid_, ") has exited")));
    return;
  }
  // A live process on this host may only be slow to answer (Soft-RoCE under load), or have
  // closed its mesh: it gets a longer backstop.
  const absl::Duration probe_timeout = peer_pid_ > 0 ? 5 * ProbeTimeout() : ProbeTimeout();
  if (state_ == State::kUp && liveness_in_flight_ &&
      now - std::max(last_probe_, last_progress_) > probe_timeout) {
    // Nothing has completed on the queue pair since the probe went out, which waits behind
    // the transfers posted before it: the queue pair should have failed the read by now (its
    // retries are spent), and some devices (Soft-RoCE) never do for a peer that is gone.
    Fail(Broken(absl::StrCat("no answer to a liveness probe within ",
                             absl::ToInt64Milliseconds(probe_timeout), " ms (", send_wrs_in_flight_,
                             " work requests in flight, ", reads_.size(), " of them reads; ",
                             queue_.size(), " messages queued, ", credits_.InFlight(),
                             " slots unfreed, ", announced_.size(), " announced)")));
    return;
  }
  if (state_ == State::kUp && !liveness_in_flight_ &&
      now - last_probe_ >= engine_.options().liveness_interval && HasPendingWork() && PostProbe()) {
    liveness_in_flight_ = true;
    last_probe_ = now;
  }
}

absl::Duration VerbsConnection::ProbeTimeout() const {
  // What the device's own retries take (every try waits 4.096 us * 2^timeout for its answer),
  // and at least half a second: a backstop for devices that never fail the read.
  const VerbsDeviceOptions& options = engine_.options();
  const absl::Duration per_try = absl::Nanoseconds(4096.0 * std::ldexp(1.0, options.ack_timeout));
  return std::max(absl::Milliseconds(500), per_try * (options.retry_count + 1));
}

bool VerbsConnection::PostProbe() {
  // An RDMA read, which only the peer's queue pair can answer: an empty write to a queue pair
  // that is gone can complete without an answer on some devices (Soft-RoCE), a read cannot.
  if (send_wrs_in_flight_ >= max_send_wr_) return false;
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uint64_t>(RingSlot(2 * slots_));
  sge.length = 8;
  sge.lkey = region_.lkey;
  ibv_send_wr wr{};
  wr.wr_id = WorkId(Op::kLiveness, 0);
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = remote_endpoint_.ring_address;
  wr.wr.rdma.rkey = remote_endpoint_.ring_rkey;
  return PostSend(wr, "a liveness probe");
}

void VerbsConnection::OnArrival(const ibv_wc& completion) {
  const int error = PostOneReceive();  // in place of the one this arrival took
  if (error != 0) {
    Fail(Broken(absl::StrCat("ibv_post_recv failed: ", std::strerror(error))));
    return;
  }
  if (completion.opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
      (completion.wc_flags & IBV_WC_WITH_IMM) == 0) {
    Fail(Broken("the peer sent something other than a write with immediate"));
    return;
  }
  const uint32_t immediate = ntohl(completion.imm_data);
  switch (ImmediateKindOf(immediate)) {
    case ImmediateKind::kSlot:
      OnSlot(ImmediateValue(immediate));
      break;
    case ImmediateKind::kCredits:
      if (!credits_.Returned(ImmediateValue(immediate))) {
        Fail(Broken("the peer returned credits for slots never written"));
      }
      break;
  }
}

void VerbsConnection::OnSlot(uint32_t slot) {
  if (slot != credits_.NextArrivalSlot()) {
    Fail(Broken(absl::StrCat("the peer wrote slot ", slot, " where slot ",
                             credits_.NextArrivalSlot(), " was next")));
    return;
  }
  const uint8_t* data = RingSlot(slot);
  SlotHeader header;
  std::memcpy(&header, data, kSlotHeaderBytes);
  if (!SlotHeaderValid(header, slot_bytes_)) {
    Fail(Broken("the peer wrote a malformed slot header"));
    return;
  }
  if (!credits_.Returned(header.credits)) {
    Fail(Broken("the peer returned credits for slots never written"));
    return;
  }
  switch (header.kind) {
    case SlotKind::kData:
      OnData(header, data + kSlotHeaderBytes);
      break;
    case SlotKind::kAnnounce:
      OnAnnounce(header);
      break;
    case SlotKind::kDone:
      OnDone(header);
      break;
  }
  credits_.Freed();
}

std::shared_ptr<RecvSlot> VerbsConnection::PopPosted(Tag tag) {
  for (;;) {
    std::optional<std::shared_ptr<RecvSlot>> slot = mesh_.matching().PopPosted(peer_, tag);
    if (!slot.has_value()) return nullptr;
    if ((*slot)->WinClaim()) return *slot;
    (*slot)->request->Complete(WithdrawnPartError(mesh_.rank()), 0);
  }
}

bool VerbsConnection::BufferEarly(Inbound& inbound) {
  inbound.buffered.reset(new (std::nothrow) uint8_t[std::max<uint64_t>(inbound.size, 1)]);
  if (inbound.buffered != nullptr) return true;
  Fail(PeerUnavailableError(
      absl::StrCat("ibverbs: connection to ", *label_, " failed: a message of ", inbound.size,
                   " bytes arrived before its receive, and there is no memory to keep it (post "
                   "receives before the peers send, or send smaller messages)"),
      peer_));
  return false;
}

void VerbsConnection::OnData(const SlotHeader& header, const uint8_t* payload) {
  std::shared_ptr<Inbound> inbound;
  if (header.offset == 0) {
    inbound = std::make_shared<Inbound>();
    inbound->tag = header.tag;
    inbound->size = header.message_bytes;
    inbound->send_id = header.send_id;
    if (std::shared_ptr<RecvSlot> slot = PopPosted(header.tag)) {
      Match(inbound, slot);
    } else {
      if (!BufferEarly(*inbound)) return;
      mesh_.matching().AddUnexpected(peer_, header.tag, inbound);
    }
    if (header.fragment_bytes < header.message_bytes) assembling_[header.send_id] = inbound;
  } else {
    auto it = assembling_.find(header.send_id);
    if (it == assembling_.end() || it->second->arrived != header.offset ||
        it->second->size != header.message_bytes) {
      Fail(Broken("the peer sent a fragment of a message that is not arriving"));
      return;
    }
    inbound = it->second;
  }
  uint8_t* destination = inbound->discard ? nullptr
                         : inbound->slot  ? inbound->slot->data
                                          : inbound->buffered.get();
  if (destination != nullptr && header.fragment_bytes > 0) {
    std::memcpy(destination + header.offset, payload, header.fragment_bytes);
  }
  inbound->arrived += header.fragment_bytes;
  if (inbound->complete()) {
    if (header.offset > 0) assembling_.erase(header.send_id);
    if (inbound->slot != nullptr) FinishRecv(inbound, absl::OkStatus());
  }
}

void VerbsConnection::OnAnnounce(const SlotHeader& header) {
  auto inbound = std::make_shared<Inbound>();
  inbound->tag = header.tag;
  inbound->size = header.message_bytes;
  inbound->send_id = header.send_id;
  inbound->announced = true;
  inbound->remote_address = header.address;
  inbound->rkey = header.rkey;
  if (std::shared_ptr<RecvSlot> slot = PopPosted(header.tag)) {
    Match(inbound, slot);
    return;
  }
  // No receive yet: read it into a buffer of this side's now, so that the send completes
  // without waiting for the receive (as on every transport); a receive copies it out later.
  if (!BufferEarly(*inbound)) return;
  mesh_.matching().AddUnexpected(peer_, header.tag, inbound);
  StartReads(inbound);
}

void VerbsConnection::OnDone(const SlotHeader& header) {
  auto it = announced_.find(header.send_id);
  if (it == announced_.end()) {
    Fail(Broken("the peer finished reading a message that was never announced"));
    return;
  }
  const std::shared_ptr<Outbound> out = std::move(it->second);
  announced_.erase(it);
  out->lease.reset();
  if (out->request != nullptr) out->request->Complete(absl::OkStatus(), out->size);
}

void VerbsConnection::Match(const std::shared_ptr<Inbound>& inbound,
                            const std::shared_ptr<RecvSlot>& slot) {
  slot->inbound = inbound;
  slot->matched_on = this;
  inbound->slot = slot;
  if (inbound->size > slot->capacity) {
    slot->request->Complete(
        InvalidArgumentError(absl::StrCat(
            "a message of ", inbound->size, " bytes from ", *label_, " (tag ", inbound->tag,
            ") is longer than the receive buffer (", slot->capacity, " bytes); it was discarded")),
        0, peer_);
    inbound->slot.reset();
    inbound->discard = true;
    if (inbound->reads_in_flight == 0) {
      inbound->buffered.reset();
      if (inbound->announced) QueueDone(*inbound);
    }  // else the last read's completion answers the sender
    return;
  }
  if (inbound->announced) {
    if (inbound->buffered == nullptr) {
      StartReads(inbound);
    } else if (inbound->complete()) {
      std::memcpy(slot->data, inbound->buffered.get(), inbound->size);
      inbound->buffered.reset();
      FinishRecv(inbound, absl::OkStatus());
    }  // else its reads are still landing in `buffered`, copied out when they end
    return;
  }
  if (inbound->arrived > 0) std::memcpy(slot->data, inbound->buffered.get(), inbound->arrived);
  inbound->buffered.reset();
  if (inbound->complete()) FinishRecv(inbound, absl::OkStatus());
}

void VerbsConnection::FinishRecv(const std::shared_ptr<Inbound>& inbound, absl::Status status) {
  const std::shared_ptr<RecvSlot> slot = std::move(inbound->slot);
  inbound->slot.reset();
  if (slot == nullptr) return;
  const bool ok = status.ok();
  slot->request->Complete(std::move(status), ok ? inbound->size : 0, peer_);
}

// --- Reads of announced messages ---

void VerbsConnection::StartReads(const std::shared_ptr<Inbound>& inbound) {
  if (inbound->size == 0) {
    FinishRecv(inbound, absl::OkStatus());
    QueueDone(*inbound);
    return;
  }
  absl::StatusOr<RegistrationCache::Lease> lease =
      engine_.registrations().Acquire(inbound->ReadTarget(), inbound->size);
  if (lease.ok()) {
    inbound->lease.emplace(*std::move(lease));
  } else {
    CHORUS_LOG(kWarn, "ibverbs") << "receiving " << inbound->size << " bytes from " << *label_
                                 << " through bounce buffers: " << lease.status().message();
    inbound->through_bounce = true;
  }
  read_queue_.push_back(inbound);
  PumpReads();
}

void VerbsConnection::PumpReads() {
  while (!read_queue_.empty() && state_ == State::kUp) {
    const std::shared_ptr<Inbound> inbound = read_queue_.front();
    if (inbound->discard || inbound->read_posted == inbound->size) {
      read_queue_.pop_front();
      continue;
    }
    if (reads_.size() >= read_depth_ || !SendRoomFor(1)) return;
    ReadChunk chunk;
    chunk.inbound = inbound;
    chunk.offset = inbound->read_posted;
    const uint64_t most = inbound->through_bounce ? VerbsEngine::kBounceBytes : kReadChunk;
    chunk.bytes = static_cast<uint32_t>(std::min(most, inbound->size - chunk.offset));
    uint8_t* local = inbound->ReadTarget() + chunk.offset;
    uint32_t lkey = 0;
    if (inbound->through_bounce) {
      if (!engine_.TakeBounce(&chunk.bounce)) return;  // waits for one to come back
      chunk.bounced = true;
      local = chunk.bounce.data;
      lkey = chunk.bounce.lkey;
    } else {
      lkey = inbound->lease->lkey();
    }
    const uint32_t ticket = next_ticket_;
    next_ticket_ = (next_ticket_ + 1) & 0xffffff;
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uint64_t>(local);
    sge.length = chunk.bytes;
    sge.lkey = lkey;
    ibv_send_wr wr{};
    wr.wr_id = WorkId(Op::kRead, ticket);
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = inbound->remote_address + chunk.offset;
    wr.wr.rdma.rkey = inbound->rkey;
    if (!PostSend(wr, "an RDMA read")) {
      if (chunk.bounced) engine_.ReturnBounce(chunk.bounce);
      return;
    }
    ++inbound->reads_in_flight;
    inbound->read_posted += chunk.bytes;
    reads_[ticket] = std::move(chunk);
  }
}

void VerbsConnection::OnReadCompleted(uint32_t ticket, bool ok) {
  auto it = reads_.find(ticket);
  if (it == reads_.end()) return;
  ReadChunk chunk = std::move(it->second);
  reads_.erase(it);
  Inbound& inbound = *chunk.inbound;
  --inbound.reads_in_flight;
  if (chunk.bounced) {
    if (ok && !inbound.discard) {
      std::memcpy(inbound.ReadTarget() + chunk.offset, chunk.bounce.data, chunk.bytes);
    }
    engine_.ReturnBounce(chunk.bounce);
  }
  inbound.read_done += chunk.bytes;
  if (inbound.discard) {
    // Its receive was cancelled or too short: once nothing is in flight, the sender may go.
    if (inbound.reads_in_flight == 0) {
      inbound.lease.reset();
      inbound.buffered.reset();
      QueueDone(inbound);
    }
    return;
  }
  if (inbound.read_done < inbound.size) return;
  inbound.lease.reset();
  QueueDone(inbound);
  if (inbound.slot == nullptr) return;  // pulled before its receive: waits in the table
  if (inbound.buffered != nullptr) {
    std::memcpy(inbound.slot->data, inbound.buffered.get(), inbound.size);
    inbound.buffered.reset();
  }
  FinishRecv(chunk.inbound, absl::OkStatus());
}

// --- Cancel and failure ---

void VerbsConnection::CancelLocked(VerbsRequest& request, std::unique_lock<std::mutex>& lock) {
  const absl::Status cancelled = AbortedError(
      absl::StrCat("cancelled ",
                   request.kind() == RequestKind::kSend ? "send to " : "receive from ", *label_),
      peer_);
  if (std::shared_ptr<Outbound> out = request.outbound.lock()) {
    auto queued = std::find(queue_.begin(), queue_.end(), out);
    if (queued != queue_.end()) {
      if (out->kind == SlotKind::kData && out->offset > 0) {
        // Partly written: the peer expects the rest, which goes out from a private copy.
        out->copy.reset(new uint8_t[out->size]);
        std::memcpy(out->copy.get(), out->data, out->size);
        out->data = out->copy.get();
      } else {
        queue_.erase(queued);
      }
    }
    // An announced message is being read by the peer, which reads every announced message at
    // once (into its own buffer when no receive is posted): the cancel returns when it has.
    const VerbsMesh::CancelWait waiting(mesh_);
    const absl::Time give_up = absl::Now() + kCancelWait;
    while (announced_.contains(out->send_id) && state_ != State::kFailed) {
      if (absl::Now() >= give_up) {
        Fail(Broken("the peer did not finish reading a cancelled send"));
        break;
      }
      engine_.reads_done().wait_for(lock, std::chrono::milliseconds(50));
    }
    request.Complete(cancelled, 0);  // no effect if it completed meanwhile
    return;
  }
  std::shared_ptr<RecvSlot> slot = request.recv_slot.lock();
  if (slot == nullptr) return;
  if (slot->inbound == nullptr) {
    mesh_.matching().Unpost(peer_, request.tag(), *slot);
    request.Complete(cancelled, 0);
    return;
  }
  CancelMatchedRecv(*slot, lock);
}

void VerbsConnection::CancelMatchedRecv(RecvSlot& slot, std::unique_lock<std::mutex>& lock) {
  const std::shared_ptr<Inbound> inbound = slot.inbound;
  inbound->discard = true;
  inbound->slot.reset();
  if (inbound->reads_in_flight == 0) inbound->buffered.reset();
  if (inbound->announced && inbound->buffered == nullptr) {
    // Reads already posted write into the caller's buffer until they complete; the cancel
    // returns only after that (they end within the queue pair's retry timeout).
    const VerbsMesh::CancelWait waiting(mesh_);
    const absl::Time give_up = absl::Now() + kCancelWait;
    while (inbound->reads_in_flight > 0 && state_ != State::kFailed) {
      if (absl::Now() >= give_up) {
        Fail(Broken("RDMA reads into a cancelled receive did not complete"));
        break;
      }
      engine_.reads_done().wait_for(lock, std::chrono::milliseconds(50));
    }
    inbound->lease.reset();
    if (state_ != State::kFailed) QueueDone(*inbound);
  }
  slot.request->Complete(AbortedError(absl::StrCat("cancelled receive from ", *label_), peer_), 0,
                         peer_);
}

void VerbsConnection::Fail(const absl::Status& status) {
  if (state_ == State::kFailed) return;
  if (HasPendingWork() && GetErrorKind(status) != ErrorKind::kAborted) {
    CHORUS_LOG(kWarn, "ibverbs") << status.message();
  } else {
    CHORUS_LOG(kInfo, "ibverbs") << "connection to " << *label_ << " closed: " << status.message();
  }
  state_ = State::kFailed;
  failure_ = status;
  if (qp_ != nullptr) {
    // From here on the device writes into no buffer of this connection's receives, and serves
    // no more reads of its sends.
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    const int error = Verbs().modify_qp(qp_, &attr, IBV_QP_STATE);
    if (error != 0) {
      // Destroying the queue pair stops it for certain (its stale completions are filtered
      // by the serial, and its number stays attached until the mesh detaches it).
      CHORUS_LOG(kWarn, "ibverbs")
          << "moving the queue pair to " << *label_ << " to the error state failed ("
          << std::strerror(error) << "); destroying it";
      Verbs().destroy_qp(qp_);
      qp_ = nullptr;
    }
  }
  std::vector<std::shared_ptr<Inbound>> receiving;
  for (auto& [send_id, inbound] : assembling_) receiving.push_back(inbound);
  for (auto& inbound : read_queue_) receiving.push_back(inbound);
  for (auto& [ticket, chunk] : reads_) {
    if (chunk.bounced) engine_.ReturnBounce(chunk.bounce);
    receiving.push_back(chunk.inbound);
  }
  assembling_.clear();
  read_queue_.clear();
  reads_.clear();
  for (const auto& inbound : receiving) {
    inbound->reads_in_flight = 0;
    inbound->lease.reset();
    FinishRecv(inbound, status);
  }
  auto queue = std::move(queue_);
  queue_.clear();
  for (const auto& out : queue) {
    if (out->request != nullptr) out->request->Complete(status, 0);
  }
  auto announced = std::move(announced_);
  announced_.clear();
  for (auto& [send_id, out] : announced) {
    if (out->request != nullptr) out->request->Complete(status, 0);
  }
  for (std::shared_ptr<Outbound>& out : written_) {
    if (out != nullptr) out->request->Complete(status, 0);
    out.reset();
  }
  VerbsMesh::Matching& matching = mesh_.matching();
  for (const auto& [tag, slot] : matching.TakePosted(peer_)) {
    matching.Unpost(peer_, tag, *slot);  // a receive from any peer fails with any of them
    slot->request->Complete(status, 0, peer_);
  }
  // Messages that arrived whole stay receivable; announced ones can no longer be read.
  matching.RetainUnexpected(peer_, [](const auto& arrived) {
    return arrived.message->complete() && arrived.message->buffered != nullptr;
  });
  engine_.reads_done().notify_all();
}

}  // namespace chorus::ibverbs
