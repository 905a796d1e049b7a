#include "chorus/transport/transport.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"

namespace chorus {

RequestPtr Mesh::RecvFromAnyPart(absl::Span<const int> peers, Tag tag, MemoryRef buffer,
                                 std::shared_ptr<ReceiveClaim> claim, int part) {
  return MakeFailedRequest(
      RequestKind::kRecv, -1, tag,
      InvalidArgumentError(absl::StrCat("rank ", rank(),
                                        ": this transport cannot share a receive from any peer "
                                        "with another transport; receive from each separately")));
}

}  // namespace chorus
