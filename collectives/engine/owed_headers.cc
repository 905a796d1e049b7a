#include "chorus/collectives/engine/owed_headers.h"

namespace chorus {

void OwedHeaders::Owe(const Owed& owed) {
  std::lock_guard<std::mutex> lock(mu_);
  owed_.push_back(owed);
}

std::optional<OwedHeaders::Owed> OwedHeaders::TakeBeyond(size_t keep) {
  std::lock_guard<std::mutex> lock(mu_);
  if (owed_.size() <= keep) return std::nullopt;
  const Owed oldest = owed_.front();
  owed_.pop_front();
  return oldest;
}

}  // namespace chorus
