// Trees for broadcast, reduce and allreduce (= reduce to rank 0, then broadcast from it),
// pipelined by segment: a node forwards segment j as soon as it has it (broadcast) or has
// combined it with its children's (reduce), while later segments are still on the wire. In an
// allreduce the two phases overlap too: between reductions a node forwards whatever result
// segments have already come back down.
//
// Both number the ranks by their position on the header ring (engine/header_ring.h) rather
// than by rank; "rank" below means that position.
//
//   binomial            one tree: virtual rank v = rank - root (mod p); v's parent is v with
//                       its lowest set bit cleared. Latency ~log2(p) steps, but the root
//                       sends the whole message log2(p) times.
//   double_binary_tree  two binary trees over the non-root ranks, each carrying half of the
//                       array, with the root on top of both (Sanders, Speck and Traeff). Tree B
//                       mirrors tree A (or shifts it, for an odd count), so a rank that is
//                       interior in one tree is a leaf in the other, and every rank sends and
//                       receives about the whole message once per direction.
//
// Determinism: a node combines (own data) op (child 0) op (child 1) ... in a fixed order and
// the result is broadcast, so all ranks get identical bits, the same on every run.
#include <algorithm>
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "chorus/collectives/algorithms/algorithms.h"
#include "chorus/collectives/algorithms/blocks.h"
#include "chorus/collectives/reduce/reduce_kernels.h"

namespace chorus {
namespace {

// This rank's place in one tree and the slice of the array that tree carries.
struct TreeRole {
  int parent = -1;                       // -1 at the root
  absl::InlinedVector<int, 8> children;  // in the order data is combined and forwarded
  size_t offset = 0;                     // elements
  size_t count = 0;
};

// A node is in at most two trees; chunks are few for the small messages whose latency the
// allocations would show in, so these stay off the heap there.
using TreeRoles = absl::InlinedVector<TreeRole, 2>;
using Transfers = absl::InlinedVector<Transfer, 4>;
using TransfersByChunk = absl::InlinedVector<absl::InlinedVector<Transfer, 2>, 4>;

TreeRoles BinomialTree(int rank, int size, int root, size_t count) {
  // Built in place: a role copied into the vector would copy its children too.
  TreeRoles roles(1);
  TreeRole& role = roles.front();
  const int v = Mod(rank - root, size);
  int lowbit = 1;
  while (lowbit < size && (v & lowbit) == 0) lowbit <<= 1;
  role.parent = BinomialFeeder(rank, root, size);
  // Children v + 2^k for 2^k below v's lowest set bit, largest subtree first.
  for (int mask = lowbit >> 1; mask >= 1; mask >>= 1) {
    if (v + mask < size) role.children.push_back(Mod(v + mask + root, size));
  }
  role.count = count;
  return roles;
}

// NCCL's binary tree over n nodes (ncclGetBtree): node 0 is the root with one child; node x's
// parent clears or moves its lowest set bit.
struct BtreeNode {
  int parent = -1;
  int children[2] = {-1, -1};
};

BtreeNode Btree(int n, int x) {
  BtreeNode node;
  int bit = 1;
  while (bit < n && (bit & x) == 0) bit <<= 1;
  if (x == 0) {
    node.children[1] = n > 1 ? bit >> 1 : -1;
    return node;
  }
  int up = (x ^ bit) | (bit << 1);
  if (up >= n) up = x ^ bit;
  node.parent = up;
  int low = bit >> 1;
  node.children[0] = low == 0 ? -1 : x - low;
  int down = low == 0 ? -1 : x + low;
  while (down >= n) {
    low >>= 1;
    down = low == 0 ? -1 : x + low;
  }
  node.children[1] = down;
  return node;
}

// Tree A is Btree over the n = p-1 non-root ranks; tree B mirrors it (n even) or shifts it by
// one (n odd). `map(x)` turns a tree node into a virtual index and back.
TreeRoles DoubleBinaryTree(int rank, int size, int root, size_t count) {
  const int n = size - 1;
  const Piece halves[2] = {PieceOf(count, 2, 0), PieceOf(count, 2, 1)};
  auto to_tree = [n](int tree, int u) {
    if (tree == 0) return u;
    return n % 2 == 0 ? n - 1 - u : Mod(u - 1, n);
  };
  auto from_tree = [n](int tree, int x) {
    if (tree == 0) return x;
    return n % 2 == 0 ? n - 1 - x : Mod(x + 1, n);
  };
  auto real_rank = [&](int u) { return Mod(u + 1 + root, size); };
  TreeRoles roles(2);
  const int u = Mod(rank - root, size) - 1;  // -1 for the root
  for (int tree = 0; tree < 2; ++tree) {
    TreeRole& role = roles[tree];
    role.offset = halves[tree].start;
    role.count = halves[tree].count;
    if (u < 0) {
      role.children.push_back(real_rank(from_tree(tree, 0)));
      continue;
    }
    const BtreeNode node = Btree(n, to_tree(tree, u));
    role.parent = node.parent < 0 ? root : real_rank(from_tree(tree, node.parent));
    for (int child : node.children) {
      if (child >= 0) role.children.push_back(real_rank(from_tree(tree, child)));
    }
  }
  return roles;
}

// What one tree run does: combine upward (reduce), spread downward (broadcast), or both.
struct TreeJob {
  TreeRoles trees;
  const uint8_t* input = nullptr;  // reduce: this rank's contribution (full array)
  uint8_t* partial = nullptr;      // reduce: where combined data goes (full array)
  uint8_t* output = nullptr;       // broadcast: where data lands / is sent from (full array)
  bool reduce = false;
  bool broadcast = false;
};

class TreeRun {
 public:
  TreeRun(CollectiveContext& ctx, const CollectiveArgs& args, const TreeJob& job)
      : ctx_(ctx), args_(args), job_(job), elem_(args.elem()) {
    size_t largest = 0;
    for (const TreeRole& role : job_.trees) largest = std::max(largest, role.count);
    segments_ = SegmentsFor(largest * elem_, ctx.tuning().segments.TreeBytes(ctx.size()));
    chunks_ = segments_ * job_.trees.size();
    window_ = std::min<size_t>(std::max(ctx.tuning().pipeline_depth, 1), chunks_);
    segment_bytes_ = PieceOf(largest, segments_, 0).count * elem_;
    up_sends_.resize(chunks_);
    down_sends_.resize(chunks_);
    down_recvs_.resize(chunks_);
  }

  absl::Status Run() {
    // A rank whose ring successor is a peer it sends data to keeps its header for that data
    // instead of sending it alone before its first wait.
    absl::InlinedVector<int, 8> receivers;
    for (const TreeRole& role : job_.trees) {
      if (job_.broadcast) {
        receivers.insert(receivers.end(), role.children.begin(), role.children.end());
      }
      if (job_.reduce && role.parent >= 0) receivers.push_back(role.parent);
    }
    ctx_.WillSendTo(receivers);
    if (job_.reduce) CHORUS_RETURN_IF_ERROR(Up());
    if (job_.broadcast) CHORUS_RETURN_IF_ERROR(Down(/*block=*/true));
    return absl::OkStatus();
  }

 private:
  const TreeRole& role(size_t chunk) const { return job_.trees[chunk % job_.trees.size()]; }
  Piece piece(size_t chunk) const {
    const TreeRole& r = role(chunk);
    const Piece p = PieceOf(r.count, segments_, chunk / job_.trees.size());
    return {r.offset + p.start, p.count};
  }

  // Reduce phase: chunk c's children arrive in slots, are combined with this rank's data and
  // the result goes up; the root of an allreduce starts the broadcast of c right away (Down).
  absl::Status Up() {
    size_t max_children = 0;
    for (const TreeRole& r : job_.trees) max_children = std::max(max_children, r.children.size());
    uint8_t* slots = ctx_.Scratch(window_ * max_children * segment_bytes_);
    auto slot = [&](size_t chunk, size_t child) {
      return slots + ((chunk % window_) * max_children + child) * segment_bytes_;
    };
    TransfersByChunk recvs(chunks_);
    auto post = [&](size_t chunk) {
      const Piece p = piece(chunk);
      for (size_t k = 0; k < role(chunk).children.size(); ++k) {
        recvs[chunk].push_back(
            ctx_.Recv(role(chunk).children[k], chunk, slot(chunk, k), p.count * elem_));
      }
    };
    for (size_t chunk = 0; chunk < window_; ++chunk) post(chunk);
    for (size_t chunk = 0; chunk < chunks_; ++chunk) {
      CHORUS_RETURN_IF_ERROR(ctx_.WaitAll(recvs[chunk]));
      const TreeRole& r = role(chunk);
      const Piece p = piece(chunk);
      const uint8_t* own = job_.input + p.start * elem_;
      uint8_t* result = job_.partial + p.start * elem_;
      const uint8_t* up = own;  // a leaf forwards its own data untouched
      for (size_t k = 0; k < r.children.size(); ++k) {
        ReduceBuffers(args_.type, args_.op, k == 0 ? own : result, slot(chunk, k), result, p.count);
        up = result;
      }
      if (r.parent >= 0) {
        // The parent posts receives only as far as its slowest child allows, so neither a
        // leaf (paced by nothing it receives) nor a node with faster children than its
        // siblings may run further ahead than a window.
        CHORUS_RETURN_IF_ERROR(FlowLimit(up_sends_, chunk));
        up_sends_[chunk] = ctx_.Send(r.parent, chunk, up, p.count * elem_);
      }
      up_posted_ = chunk + 1;
      if (chunk + window_ < chunks_) post(chunk + window_);
      if (job_.broadcast) CHORUS_RETURN_IF_ERROR(Down(/*block=*/false));
    }
    return absl::OkStatus();
  }

  // Before chunk's send goes out: waits until the one a window earlier is done, so at most a
  // window of sends wait for the receiver's receives, which it posts a window ahead. A message
  // beyond them would arrive unexpected and be kept aside by the transport (shm copies a large
  // one into memory of its own).
  absl::Status FlowLimit(const Transfers& sends, size_t chunk) {
    if (chunk < window_ || sends[chunk - window_].request == nullptr) return absl::OkStatus();
    return ctx_.Wait(sends[chunk - window_]);
  }
  absl::Status FlowLimit(const TransfersByChunk& sends, size_t chunk) {
    if (chunk < window_) return absl::OkStatus();
    return ctx_.WaitAll(sends[chunk - window_]);
  }
  // Whether FlowLimit(sends, chunk) would return at once.
  bool FlowAllows(const TransfersByChunk& sends, size_t chunk) {
    if (chunk < window_) return true;
    for (const Transfer& send : sends[chunk - window_]) {
      if (!ctx_.Ready(send)) return false;
    }
    return true;
  }

  void SendDown(size_t chunk, const uint8_t* data) {
    const Piece p = piece(chunk);
    for (int child : role(chunk).children) {
      down_sends_[chunk].push_back(ctx_.Send(child, chunks_ + chunk, data, p.count * elem_));
    }
  }

  // Broadcast phase: chunk c arrives from the parent into the output and is passed on, with
  // `window_` receives posted ahead. Non-blocking (block = false) it does only what is ready,
  // so Up() can call it between reductions; blocking, it finishes the phase.
  absl::Status Down(bool block) {
    while (forwarded_ < chunks_) {
      while (posted_down_ < chunks_ && posted_down_ < forwarded_ + window_) {
        const size_t chunk = posted_down_;
        const TreeRole& r = role(chunk);
        if (r.parent >= 0) {
          if (job_.reduce) {
            // The chunk lands where this rank's partial was sent up from: that send must be
            // finished first.
            if (chunk >= up_posted_) break;
            if (!block && !ctx_.Ready(up_sends_[chunk])) break;
            CHORUS_RETURN_IF_ERROR(ctx_.Wait(up_sends_[chunk]));
          }
          const Piece p = piece(chunk);
          down_recvs_[chunk] =
              ctx_.Recv(r.parent, chunks_ + chunk, job_.output + p.start * elem_, p.count * elem_);
        }
        ++posted_down_;
      }
      if (forwarded_ == posted_down_) return absl::OkStatus();  // only when not blocking
      const size_t chunk = forwarded_;
      if (role(chunk).parent >= 0) {
        if (!block && !ctx_.Ready(down_recvs_[chunk])) return absl::OkStatus();
        CHORUS_RETURN_IF_ERROR(ctx_.Wait(down_recvs_[chunk]));
      } else if (job_.reduce && chunk >= up_posted_) {
        return absl::OkStatus();  // the allreduce root sends a chunk once it has reduced it
      }
      // A child that falls behind posts its receives late: the root (paced by nothing it
      // receives) and every forwarding rank wait for it, blocking only once Up is done.
      if (!block && !FlowAllows(down_sends_, chunk)) return absl::OkStatus();
      CHORUS_RETURN_IF_ERROR(FlowLimit(down_sends_, chunk));
      SendDown(chunk, job_.output + piece(chunk).start * elem_);
      ++forwarded_;
    }
    return absl::OkStatus();
  }

  CollectiveContext& ctx_;
  const CollectiveArgs& args_;
  const TreeJob& job_;
  const size_t elem_;
  size_t segments_ = 1;
  size_t chunks_ = 0;
  size_t window_ = 1;
  size_t segment_bytes_ = 0;
  Transfers up_sends_;
  TransfersByChunk down_sends_;  // per chunk, one per child
  Transfers down_recvs_;
  size_t up_posted_ = 0;    // chunks whose upward send has been posted
  size_t posted_down_ = 0;  // chunks whose downward receive has been posted (or needs none)
  size_t forwarded_ = 0;    // chunks passed on to the children
};

using TreeBuilder = TreeRoles (*)(int rank, int size, int root, size_t count);

// This rank's roles in the trees `build` makes over the ranks' positions on the header ring
// (engine/header_ring.h), so that a rank's ring successor is, as often as in rank order, a
// child it sends to anyway and its header rides on that data.
TreeRoles BuildOnRing(const CollectiveContext& ctx, TreeBuilder build, int root, size_t count) {
  TreeRoles trees = build(ctx.RingPosition(ctx.rank()), ctx.size(), ctx.RingPosition(root), count);
  for (TreeRole& tree : trees) {
    if (tree.parent >= 0) tree.parent = ctx.RankAtRingPosition(tree.parent);
    for (int& child : tree.children) child = ctx.RankAtRingPosition(child);
  }
  return trees;
}

absl::Status TreeBroadcast(CollectiveContext& ctx, const CollectiveArgs& args, TreeBuilder build) {
  TreeJob job{BuildOnRing(ctx, build, args.root, args.count)};
  job.output = static_cast<uint8_t*>(args.recv);
  job.broadcast = true;
  if (ctx.rank() == args.root && args.send != args.recv && args.count > 0) {
    std::memcpy(args.recv, args.send, args.count * args.elem());
  }
  return TreeRun(ctx, args, job).Run();
}

absl::Status TreeReduce(CollectiveContext& ctx, const CollectiveArgs& args, TreeBuilder build) {
  TreeJob job{BuildOnRing(ctx, build, args.root, args.count)};
  job.input = static_cast<const uint8_t*>(args.send);
  job.partial = ctx.rank() == args.root ? static_cast<uint8_t*>(args.recv)
                                        : ctx.Scratch(args.count * args.elem());
  job.reduce = true;
  return TreeRun(ctx, args, job).Run();
}

absl::Status TreeAllReduce(CollectiveContext& ctx, const CollectiveArgs& args, TreeBuilder build) {
  TreeJob job{BuildOnRing(ctx, build, /*root=*/0, args.count)};
  job.input = static_cast<const uint8_t*>(args.send);
  job.partial = static_cast<uint8_t*>(args.recv);
  job.output = static_cast<uint8_t*>(args.recv);
  job.reduce = true;
  job.broadcast = true;
  return TreeRun(ctx, args, job).Run();
}

}  // namespace

absl::Status BinomialAllReduce(CollectiveContext& ctx, const CollectiveArgs& args) {
  return TreeAllReduce(ctx, args, BinomialTree);
}
absl::Status BinomialBroadcast(CollectiveContext& ctx, const CollectiveArgs& args) {
  return TreeBroadcast(ctx, args, BinomialTree);
}
int BinomialFeeder(int position, int root_position, int size) {
  const int v = Mod(position - root_position, size);
  // The parent clears v's lowest set bit. Called twice per small call on messages: no tree.
  return v == 0 ? -1 : Mod((v & (v - 1)) + root_position, size);
}
absl::Status BinomialReduce(CollectiveContext& ctx, const CollectiveArgs& args) {
  return TreeReduce(ctx, args, BinomialTree);
}
absl::Status DoubleTreeAllReduce(CollectiveContext& ctx, const CollectiveArgs& args) {
  return TreeAllReduce(ctx, args, DoubleBinaryTree);
}
absl::Status DoubleTreeBroadcast(CollectiveContext& ctx, const CollectiveArgs& args) {
  return TreeBroadcast(ctx, args, DoubleBinaryTree);
}
absl::Status DoubleTreeReduce(CollectiveContext& ctx, const CollectiveArgs& args) {
  return TreeReduce(ctx, args, DoubleBinaryTree);
}

}  // namespace chorus
