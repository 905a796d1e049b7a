#include "chorus/cuda/ipc_mappings.h"

namespace chorus {

IpcMappings::~IpcMappings() {
  for (const auto& [handle, mapping] : mappings_) close_(mapping.base, mapping.device);
}

absl::StatusOr<void*> IpcMappings::Acquire(const Handle& handle, int device,
                                           absl::FunctionRef<absl::StatusOr<void*>()> open) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = mappings_.find(handle);
  if (it == mappings_.end()) {
    // Room first, so that the new mapping is not the one closed.
    if (capacity_ > 0) CloseUnusedBeyond(capacity_ - 1);
    absl::StatusOr<void*> base = open();
    if (!base.ok()) return base.status();
    it = mappings_.emplace(handle, Mapping{*base, device}).first;
  }
  ++it->second.users;
  it->second.last_use = ++uses_;
  return it->second.base;
}

void IpcMappings::Release(const Handle& handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = mappings_.find(handle);
  if (it == mappings_.end() || it->second.users == 0) return;
  --it->second.users;
  // Mappings in use may have pushed the cache past its capacity.
  CloseUnusedBeyond(capacity_);
}

void IpcMappings::CloseUnusedBeyond(size_t keep) {
  while (mappings_.size() > keep) {
    auto oldest = mappings_.end();
    for (auto it = mappings_.begin(); it != mappings_.end(); ++it) {
      if (it->second.users > 0) continue;
      if (oldest == mappings_.end() || it->second.last_use < oldest->second.last_use) oldest = it;
    }
    if (oldest == mappings_.end()) return;  // every mapping is in use
    close_(oldest->second.base, oldest->second.device);
    mappings_.erase(oldest);
  }
}

size_t IpcMappings::open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mappings_.size();
}

size_t IpcMappings::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t count = 0;
  for (const auto& [handle, mapping] : mappings_) count += mapping.users > 0 ? 1 : 0;
  return count;
}

}  // namespace chorus
