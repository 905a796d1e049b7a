#include "chorus/collectives/engine/owed_headers.h"

#include <utility>

namespace chorus {

std::optional<OwedHeaders::Owed> OwedHeaders::Exchange(const Owed& newest) {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(owed_, newest);
}

}  // namespace chorus
