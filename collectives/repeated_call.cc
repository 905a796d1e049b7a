#include "chorus/collectives/repeated_call.h"

#include <atomic>

namespace chorus {
namespace {

// Every field of CollectiveArgs that a RepeatableCall can differ in.
struct CallKey {
  uint64_t communicator = 0;  // 0: nothing kept (ids start at 1)
  CollectiveKind kind = CollectiveKind::kBarrier;
  DataType type = DataType::kUint8;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;
  const void* send = nullptr;
  const void* recv = nullptr;
  size_t count = 0;

  bool operator==(const CallKey& other) const {
    return communicator == other.communicator && kind == other.kind && type == other.type &&
           op == other.op && root == other.root && send == other.send && recv == other.recv &&
           count == other.count;
  }
};

CallKey KeyOf(uint64_t communicator, const CollectiveArgs& args) {
  CallKey key;
  key.communicator = communicator;
  key.kind = args.kind;
  key.type = args.type;
  key.op = args.op;
  key.root = args.root;
  key.send = args.send;
  key.recv = args.recv;
  key.count = args.count;
  return key;
}

struct Kept {
  CallKey key;
  RepeatedCall call;
};

// Constant-initialized and trivially destructible: no guard on the way in, nothing at exit.
thread_local Kept kept;

std::atomic<uint64_t> last_communicator_id{0};

}  // namespace

bool RepeatableCall(const CollectiveArgs& args, const CollectiveOptions& options,
                    bool placement_asked) {
  return !placement_asked && options.algorithm.empty() && args.cuda_device < 0 &&
         args.counts.empty() && args.displs.empty() && args.send_counts.empty() &&
         args.send_displs.empty();
}

const RepeatedCall* FindRepeatedCall(uint64_t communicator, const CollectiveArgs& args) {
  return kept.key == KeyOf(communicator, args) ? &kept.call : nullptr;
}

void KeepRepeatedCall(uint64_t communicator, const CollectiveArgs& args,
                      const AlgorithmEntry* algorithm, const CollectiveHeader& header) {
  kept.key = KeyOf(communicator, args);
  kept.call.algorithm = algorithm;
  kept.call.header = header;
}

uint64_t NewCommunicatorId() {
  return last_communicator_id.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace chorus
