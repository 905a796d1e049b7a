#include "tests/cuda/host_gpu_runtime.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "chorus/collectives/reduce/reduce_kernels.h"
#include "chorus/core/status.h"

namespace chorus::testing {

HostGpuRuntime::~HostGpuRuntime() {
  for (auto& [start, allocation] : allocations_) std::free(const_cast<char*>(start));
}

void* HostGpuRuntime::MakeStream(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  stream_handles_.push_back(std::make_unique<int>(device));
  streams_[stream_handles_.back().get()] = device;
  return stream_handles_.back().get();
}

int HostGpuRuntime::pinned_blocks_live() const {
  std::lock_guard<std::mutex> lock(mu_);
  int live = 0;
  for (const auto& [start, allocation] : allocations_) live += allocation.device < 0 ? 1 : 0;
  return live;
}

absl::Status HostGpuRuntime::Available() { return absl::OkStatus(); }

absl::StatusOr<PointerLocation> HostGpuRuntime::Locate(const void* pointer) {
  const char* p = static_cast<const char*>(pointer);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocations_.upper_bound(p);
  PointerLocation location;
  if (it == allocations_.begin()) return location;
  --it;
  if (p < it->first + it->second.bytes && it->second.device >= 0) {
    location.on_device = true;
    location.device = it->second.device;
  }
  return location;
}

absl::StatusOr<int> HostGpuRuntime::StreamDevice(void* stream) {
  if (stream == nullptr) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return InvalidArgumentError("not a stream of the host stand-in");
  return it->second;
}

absl::StatusOr<void*> HostGpuRuntime::AllocatePinned(size_t bytes) {
  void* pointer = std::malloc(bytes);
  if (pointer == nullptr) return InternalError("out of memory");
  std::lock_guard<std::mutex> lock(mu_);
  allocations_[static_cast<char*>(pointer)] = {bytes, -1};
  pinned_allocations_.fetch_add(1);
  return pointer;
}

void HostGpuRuntime::FreePinned(void* pointer) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    allocations_.erase(static_cast<char*>(pointer));
  }
  std::free(pointer);
}

absl::StatusOr<void*> HostGpuRuntime::AllocateDevice(int device, size_t bytes) {
  if (device < 0 || device >= devices_) {
    return InvalidArgumentError(absl::StrCat("no device ", device));
  }
  // One byte more, so that a zero-byte buffer still has an address of its own.
  void* pointer = std::malloc(bytes + 1);
  if (pointer == nullptr) return InternalError("out of memory");
  std::lock_guard<std::mutex> lock(mu_);
  allocations_[static_cast<char*>(pointer)] = {bytes + 1, device};
  return pointer;
}

void HostGpuRuntime::FreeDevice(int device, void* pointer) { FreePinned(pointer); }

absl::StatusOr<IpcMemory> HostGpuRuntime::ExportMemory(int device, const void* pointer) {
  CHORUS_ASSIGN_OR_RETURN(const PointerLocation location, Locate(pointer));
  if (!location.on_device || location.device != device) {
    return InvalidArgumentError("not device memory of the host stand-in");
  }
  IpcMemory memory;
  const int64_t pid = getpid();
  std::memcpy(memory.handle.data(), &pointer, sizeof(pointer));
  std::memcpy(memory.handle.data() + sizeof(pointer), &pid, sizeof(pid));
  return memory;
}

absl::StatusOr<void*> HostGpuRuntime::OpenMemory(int device, const IpcMemory& memory) {
  void* pointer = nullptr;
  int64_t pid = 0;
  std::memcpy(&pointer, memory.handle.data(), sizeof(pointer));
  std::memcpy(&pid, memory.handle.data() + sizeof(pointer), sizeof(pid));
  if (pid != getpid()) {
    return InvalidArgumentError("the host stand-in cannot share memory between processes");
  }
  return static_cast<char*>(pointer) + memory.offset;
}

absl::Status HostGpuRuntime::EnablePeerAccess(int device, int peer) {
  if (device == peer) return absl::OkStatus();
  if (refusing_peer_access_.load()) {
    return InvalidArgumentError(absl::StrCat("device ", device, " cannot reach device ", peer,
                                             "'s memory (refused by the test)"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  peer_access_.insert({device, peer});
  return absl::OkStatus();
}

bool HostGpuRuntime::peer_access(int device, int peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return peer_access_.count({device, peer}) > 0;
}

size_t HostGpuRuntime::pending_work(int device, void* stream) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto queue = queues_.find({device, stream});
  return queue == queues_.end() ? 0 : queue->second.work.size();
}

void HostGpuRuntime::Enqueue(int device, void* stream, std::function<void()> work) {
  std::lock_guard<std::mutex> lock(mu_);
  queues_[{device, stream}].work.push_back(std::move(work));
}

absl::Status HostGpuRuntime::CopyAsync(void* dst, const void* src, size_t bytes, int device,
                                       void* stream) {
  const bool fails = failing_copies_.load() > 0 && (copies_before_failing_.load() <= 0 ||
                                                    copies_before_failing_.fetch_sub(1) <= 0);
  if (fails && failing_copies_.fetch_sub(1) > 0) {
    return InternalError(
        "cudaMemcpyAsync failed: cudaErrorLaunchFailure "
        "(injected by the test)");
  }
  copies_queued_.fetch_add(1);
  Enqueue(device, stream, [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  return absl::OkStatus();
}

absl::Status HostGpuRuntime::ReduceAsync(DataType type, ReduceOp op,
                                         absl::Span<const void* const> inputs, void* dst,
                                         size_t count, int device, void* stream) {
  if (inputs.empty()) return InvalidArgumentError("ReduceAsync without inputs");
  // The host kernels pairwise, in input order: what the device kernel must equal.
  Enqueue(device, stream, [=, inputs = std::vector<const void*>(inputs.begin(), inputs.end())] {
    const size_t bytes = count * DataTypeSize(type);
    if (inputs.size() == 1 && dst != inputs[0]) std::memcpy(dst, inputs[0], bytes);
    for (size_t k = 1; k < inputs.size(); ++k) {
      ReduceBuffers(type, op, k == 1 ? inputs[0] : dst, inputs[k], dst, count);
    }
    if (op == ReduceOp::kAvg) {
      DivideBuffer(type, dst, count, static_cast<int>(inputs.size()));
    }
  });
  return absl::OkStatus();
}

absl::Status HostGpuRuntime::WaitStream(int device, void* stream, Deadline deadline) {
  Queue* queue;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue = &queues_[{device, stream}];  // std::map nodes stay where they are
  }
  std::lock_guard<std::mutex> running(queue->running);
  std::vector<std::function<void()>> work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    work.swap(queue->work);
  }
  for (auto& step : work) step();
  return absl::OkStatus();
}

}  // namespace chorus::testing
