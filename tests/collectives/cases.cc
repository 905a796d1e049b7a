#include "tests/collectives/cases.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "chorus/core/half.h"
#include "chorus/core/status.h"

namespace chorus::testing {
namespace {

constexpr uint8_t kPoison = 0xa5;

bool IsUnsigned(DataType type) {
  return type == DataType::kUint8 || type == DataType::kUint16 || type == DataType::kUint32 ||
         type == DataType::kUint64;
}

// Inputs of reductions: sums of 9 ranks stay within [-54, 108], products are +-2^k with
// k <= 3, so every type (int8, bfloat16's 8-bit mantissa, ...) holds every partial exactly.
double ReductionInput(DataType type, ReduceOp op, int rank, size_t i) {
  if (op == ReduceOp::kProd) {
    double v = (rank + i) % 3 == 0 ? 2 : 1;
    if (!IsUnsigned(type) && (rank * 5 + i) % 4 == 1) v = -v;
    return v;
  }
  const double base = static_cast<double>((rank * 7 + i * 3) % 13);
  return IsUnsigned(type) ? base : base - 6;
}

// Inputs of data movement: 251 distinct values per rank pattern, so a misplaced block shows.
double MovedInput(DataType type, int rank, size_t i) {
  const double base = static_cast<double>((rank * 31 + i * 7) % 251);
  return IsUnsigned(type) ? base : base - 125;
}

std::string ElementText(DataType type, const uint8_t* base, size_t index) {
  const void* at = base + index * DataTypeSize(type);
  switch (type) {
    case DataType::kInt8:
      return absl::StrCat(*static_cast<const int8_t*>(at));
    case DataType::kUint8:
      return absl::StrCat(*static_cast<const uint8_t*>(at));
    case DataType::kInt16:
      return absl::StrCat(*static_cast<const int16_t*>(at));
    case DataType::kUint16:
      return absl::StrCat(*static_cast<const uint16_t*>(at));
    case DataType::kInt32:
      return absl::StrCat(*static_cast<const int32_t*>(at));
    case DataType::kUint32:
      return absl::StrCat(*static_cast<const uint32_t*>(at));
    case DataType::kInt64:
      return absl::StrCat(*static_cast<const int64_t*>(at));
    case DataType::kUint64:
      return absl::StrCat(*static_cast<const uint64_t*>(at));
    case DataType::kFloat16:
      return absl::StrCat(Float16::ToFloat(*static_cast<const uint16_t*>(at)));
    case DataType::kBFloat16:
      return absl::StrCat(BFloat16::ToFloat(*static_cast<const uint16_t*>(at)));
    case DataType::kFloat32:
      return absl::StrCat(*static_cast<const float*>(at));
    case DataType::kFloat64:
      return absl::StrCat(*static_cast<const double*>(at));
  }
  return "?";
}

// The reduction of element `i` over all ranks, as the library must produce it: exact partials,
// and for kAvg one division in the element type (integers truncate toward zero).
double ExpectedReduction(DataType type, ReduceOp op, int ranks, size_t i) {
  double acc = ReductionInput(type, op, 0, i);
  for (int r = 1; r < ranks; ++r) {
    const double v = ReductionInput(type, op, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += v;
        break;
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
    }
  }
  if (op != ReduceOp::kAvg) return acc;
  switch (type) {
    case DataType::kFloat64:
      return acc / ranks;
    case DataType::kFloat32:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return static_cast<float>(acc) / static_cast<float>(ranks);
    default:
      return std::trunc(acc / ranks);
  }
}

// One rank's buffers for a case: what goes in, what must come out. The vectors are reused
// from case to case (per rank thread), so megabyte cases do not fault in fresh pages each time.
struct Buffers {
  explicit Buffers(DataType type) : type(type), elem(DataTypeSize(type)) {}

  void Resize(size_t send_elems, size_t recv_elems) {
    send.resize(send_elems * elem);  // every input byte is written by the case
    recv.assign(recv_elems * elem, kPoison);
    expected.assign(recv_elems * elem, kPoison);
  }
  uint8_t* send_at(size_t index) { return send.data() + index * elem; }
  uint8_t* recv_at(size_t index) { return recv.data() + index * elem; }

  DataType type;
  size_t elem;
  std::vector<uint8_t>& send = Reused(0);
  std::vector<uint8_t>& recv = Reused(1);
  std::vector<uint8_t>& expected = Reused(2);

 private:
  static std::vector<uint8_t>& Reused(int which) {
    thread_local std::vector<uint8_t> buffers[3];
    return buffers[which];
  }
};

// The device copies of a case's buffers (CaseMemory). The call's pointers into the host buffers
// map to the same offsets in the copies; the first mapping uploads both buffers, which the case
// has filled by then, and Download brings the receive buffer back to be checked.
class DeviceMirror {
 public:
  DeviceMirror(const CaseMemory& memory, Buffers& b) : memory_(memory), b_(b) {}
  ~DeviceMirror() {
    if (send_ != nullptr) memory_.runtime->FreeDevice(memory_.device, send_);
    if (recv_ != nullptr) memory_.runtime->FreeDevice(memory_.device, recv_);
  }
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;

  template <typename T>
  T* operator()(T* host) {
    if (memory_.runtime == nullptr || host == nullptr) return host;
    if (!uploaded_) Upload();
    const uint8_t* p = reinterpret_cast<const uint8_t*>(host);
    if (!b_.send.empty() && p >= b_.send.data() && p < b_.send.data() + b_.send.size()) {
      return reinterpret_cast<T*>(send_ + (p - b_.send.data()));
    }
    return reinterpret_cast<T*>(recv_ + (p - b_.recv.data()));
  }

  absl::Status Download() {
    if (!uploaded_ || !status_.ok()) return status_;
    CHORUS_RETURN_IF_ERROR(memory_.runtime->CopyAsync(b_.recv.data(), recv_, b_.recv.size(),
                                                      memory_.device, memory_.stream));
    return memory_.runtime->WaitStream(memory_.device, memory_.stream, Deadline::Infinite());
  }

  const absl::Status& status() const { return status_; }

 private:
  void Upload() {
    uploaded_ = true;
    status_ = Copy(b_.send, send_);
    if (status_.ok()) status_ = Copy(b_.recv, recv_);
    if (status_.ok()) {
      status_ = memory_.runtime->WaitStream(memory_.device, memory_.stream, Deadline::Infinite());
    }
  }
  absl::Status Copy(const std::vector<uint8_t>& host, uint8_t*& device) {
    // At least one byte, so that an empty buffer still has an address of its own.
    CHORUS_ASSIGN_OR_RETURN(void* allocated,
                            memory_.runtime->AllocateDevice(memory_.device, host.size() + 1));
    device = static_cast<uint8_t*>(allocated);
    return memory_.runtime->CopyAsync(device, host.data(), host.size(), memory_.device,
                                      memory_.stream);
  }

  const CaseMemory& memory_;
  Buffers& b_;
  bool uploaded_ = false;
  absl::Status status_;
  uint8_t* send_ = nullptr;
  uint8_t* recv_ = nullptr;
};

// Per-rank counts of the v-collectives: uneven, with empty blocks.
std::vector<size_t> VCounts(size_t count, int ranks) {
  std::vector<size_t> counts(ranks);
  for (int q = 0; q < ranks; ++q) counts[q] = q % 3 == 2 ? 0 : count + q;
  return counts;
}

std::vector<size_t> Packed(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  for (size_t q = 1; q < counts.size(); ++q) offsets[q] = offsets[q - 1] + counts[q - 1];
  return offsets;
}

// Displacements with a one-element gap before every block: the gaps must stay poisoned.
std::vector<size_t> Gapped(const std::vector<size_t>& counts) {
  std::vector<size_t> displs(counts.size(), 0);
  size_t at = 0;
  for (size_t q = 0; q < counts.size(); ++q) {
    displs[q] = at + 1;
    at = displs[q] + counts[q];
  }
  return displs;
}

size_t End(const std::vector<size_t>& displs, const std::vector<size_t>& counts) {
  return counts.empty() ? 0 : displs.back() + counts.back() + 1;
}

size_t Total(const std::vector<size_t>& counts) {
  size_t total = 0;
  for (size_t c : counts) total += c;
  return total;
}

// Elements rank `from` sends to rank `to` in alltoallv (symmetric for in-place runs).
size_t AllToAllVCount(size_t count, int from, int to, bool symmetric) {
  if (symmetric) return count + (from + to) % 3;
  return (from + 2 * to) % 4 == 3 ? 0 : count + (from + to) % 3;
}

absl::Status Compare(const Case& c, int rank, const std::vector<uint8_t>& got,
                     const std::vector<uint8_t>& expected, size_t from_byte = 0) {
  const size_t elem = DataTypeSize(c.type);
  if (expected.size() == from_byte) return absl::OkStatus();
  if (got.size() >= expected.size() &&
      std::memcmp(got.data() + from_byte, expected.data() + from_byte,
                  expected.size() - from_byte) == 0) {
    return absl::OkStatus();
  }
  for (size_t b = from_byte; b < expected.size(); ++b) {
    if (got[b] != expected[b]) {
      const size_t index = (b - from_byte) / elem;
      const bool poison = expected[b] == kPoison && expected.size() > 0;
      return InternalError(absl::StrCat(c.Describe(), " on rank ", rank, ": element ", index,
                                        " is ", ElementText(c.type, got.data() + from_byte, index),
                                        ", expected ",
                                        ElementText(c.type, expected.data() + from_byte, index),
                                        poison ? " (a byte that must not be written)" : ""));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void SetElement(DataType type, void* base, size_t index, double value) {
  switch (type) {
    case DataType::kInt8:
      static_cast<int8_t*>(base)[index] = static_cast<int8_t>(value);
      return;
    case DataType::kUint8:
      static_cast<uint8_t*>(base)[index] = static_cast<uint8_t>(value);
      return;
    case DataType::kInt16:
      static_cast<int16_t*>(base)[index] = static_cast<int16_t>(value);
      return;
    case DataType::kUint16:
      static_cast<uint16_t*>(base)[index] = static_cast<uint16_t>(value);
      return;
    case DataType::kInt32:
      static_cast<int32_t*>(base)[index] = static_cast<int32_t>(value);
      return;
    case DataType::kUint32:
      static_cast<uint32_t*>(base)[index] = static_cast<uint32_t>(value);
      return;
    case DataType::kInt64:
      static_cast<int64_t*>(base)[index] = static_cast<int64_t>(value);
      return;
    case DataType::kUint64:
      static_cast<uint64_t*>(base)[index] = static_cast<uint64_t>(value);
      return;
    case DataType::kFloat16:
      static_cast<uint16_t*>(base)[index] = Float16(static_cast<float>(value)).bits;
      return;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(base)[index] = BFloat16(static_cast<float>(value)).bits;
      return;
    case DataType::kFloat32:
      static_cast<float*>(base)[index] = static_cast<float>(value);
      return;
    case DataType::kFloat64:
      static_cast<double*>(base)[index] = value;
      return;
  }
}

double ElementValue(DataType type, const void* base, size_t index) {
  switch (type) {
    case DataType::kInt8:
      return static_cast<const int8_t*>(base)[index];
    case DataType::kUint8:
      return static_cast<const uint8_t*>(base)[index];
    case DataType::kInt16:
      return static_cast<const int16_t*>(base)[index];
    case DataType::kUint16:
      return static_cast<const uint16_t*>(base)[index];
    case DataType::kInt32:
      return static_cast<const int32_t*>(base)[index];
    case DataType::kUint32:
      return static_cast<const uint32_t*>(base)[index];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(base)[index]);
    case DataType::kUint64:
      return static_cast<double>(static_cast<const uint64_t*>(base)[index]);
    case DataType::kFloat16:
      return Float16::ToFloat(static_cast<const uint16_t*>(base)[index]);
    case DataType::kBFloat16:
      return BFloat16::ToFloat(static_cast<const uint16_t*>(base)[index]);
    case DataType::kFloat32:
      return static_cast<const float*>(base)[index];
    case DataType::kFloat64:
      return static_cast<const double*>(base)[index];
  }
  return 0;
}

std::string Case::Describe() const {
  return absl::StrCat(CollectiveKindName(kind), "[", algorithm.empty() ? "auto" : algorithm, ", ",
                      DataTypeName(type), ", ", IsReduction(kind) ? ReduceOpName(op) : "-",
                      ", count ", count, in_place ? ", in place" : ", out of place",
                      IsRooted(kind) ? absl::StrCat(", root ", root) : "", "]");
}

std::vector<Case> BuildCases(const Matrix& matrix, int ranks) {
  std::vector<CollectiveKind> kinds = matrix.kinds;
  if (kinds.empty()) {
    for (int k = 0; k <= static_cast<int>(CollectiveKind::kBarrier); ++k) {
      kinds.push_back(static_cast<CollectiveKind>(k));
    }
  }
  std::vector<DataType> types = matrix.types;
  std::vector<ReduceOp> ops = matrix.ops;
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer runs the cases 20-50x slower and looks for races, which the element type
  // and the op do not change (they only pick a kernel that touches no shared state): one type
  // of each width (1, 2, 4 and 8 bytes) stands for the rest, and sum and avg (the one op with a
  // step of its own) for the ops. The other builds run them all.
  if (types.empty()) {
    types = {DataType::kInt8, DataType::kBFloat16, DataType::kFloat32, DataType::kInt64};
  }
  if (ops.empty()) ops = {ReduceOp::kSum, ReduceOp::kAvg};
#endif
  if (types.empty()) {
    for (int t = 0; t < kNumDataTypes; ++t) types.push_back(static_cast<DataType>(t));
  }
  if (ops.empty()) {
    for (int o = 0; o < kNumReduceOps; ++o) ops.push_back(static_cast<ReduceOp>(o));
  }
  std::vector<Case> cases;
  int rotation = 0;
  for (CollectiveKind kind : kinds) {
    std::vector<std::string> algorithms = {""};
    if (matrix.every_algorithm) algorithms = Communicator::Algorithms(kind);
    if (!matrix.algorithms.empty()) algorithms = matrix.algorithms;
    const bool barrier = kind == CollectiveKind::kBarrier;
    for (const std::string& algorithm : algorithms) {
      for (DataType type : barrier ? std::vector<DataType>{DataType::kUint8} : types) {
        for (ReduceOp op : IsReduction(kind) ? ops : std::vector<ReduceOp>{ReduceOp::kSum}) {
          for (size_t count : barrier ? std::vector<size_t>{0} : matrix.counts) {
            for (bool in_place : matrix.both_placements && !barrier ? std::vector<bool>{false, true}
                                                                    : std::vector<bool>{false}) {
              Case c;
              c.kind = kind;
              c.algorithm = algorithm;
              c.type = type;
              c.op = op;
              c.count = count;
              if (matrix.counts_are_totals && kind != CollectiveKind::kAllReduce &&
                  kind != CollectiveKind::kBroadcast && kind != CollectiveKind::kReduce) {
                c.count = count / ranks;
              }
              c.in_place = in_place;
              c.root = IsRooted(kind) ? (rotation++ % ranks) : 0;
              cases.push_back(c);
            }
          }
        }
      }
    }
  }
  return cases;
}

absl::Status RunCase(Communicator& comm, const Case& c, const CaseMemory& memory) {
  const int p = comm.size();
  const int r = comm.rank();
  const size_t n = c.count;
  const DataType t = c.type;
  const bool is_root = r == c.root;
  CollectiveOptions options;
  options.algorithm = c.algorithm;
  Buffers b(t);
  DeviceMirror d(memory, b);
  if (memory.runtime != nullptr) {
    options.memory = MemoryPlacement::kCuda;
    options.cuda_stream = memory.stream;
  }
  // Inputs are periodic in the index (156 for reductions, 251 for moved data), so one period
  // is converted and then tiled: megabyte cases cost memcpy, not per-element conversions.
  auto fill = [&](uint8_t* base, size_t elems, size_t first_index, size_t period,
                  const auto& value) {
    if (elems == 0) return;
    std::vector<uint8_t> tile(period * b.elem);
    for (size_t i = 0; i < period; ++i) SetElement(t, tile.data(), i, value(first_index + i));
    for (size_t done = 0; done < elems; done += period) {
      std::memcpy(base + done * b.elem, tile.data(), std::min(period, elems - done) * b.elem);
    }
  };
  constexpr size_t kReductionPeriod = 156;
  constexpr size_t kMovedPeriod = 251;
  auto reduction_input = [&](uint8_t* base, size_t elems, size_t first_index) {
    fill(base, elems, first_index, kReductionPeriod,
         [&](size_t i) { return ReductionInput(t, c.op, r, i); });
  };
  auto expect_reduction = [&](size_t at, size_t elems, size_t first_index) {
    fill(b.expected.data() + at * b.elem, elems, first_index, kReductionPeriod,
         [&](size_t i) { return ExpectedReduction(t, c.op, p, i); });
  };
  auto moved_input = [&](uint8_t* base, size_t elems, int rank, size_t first_index) {
    fill(base, elems, first_index, kMovedPeriod, [&](size_t i) { return MovedInput(t, rank, i); });
  };
  auto expect_moved = [&](size_t at, size_t elems, int rank, size_t first_index) {
    fill(b.expected.data() + at * b.elem, elems, first_index, kMovedPeriod,
         [&](size_t i) { return MovedInput(t, rank, i); });
  };
  absl::Status status;
  size_t check_from = 0;  // in-place reduce-scatter only defines this rank's block

  switch (c.kind) {
    case CollectiveKind::kAllReduce: {
      b.Resize(n, n);
      expect_reduction(0, n, 0);
      uint8_t* in = c.in_place ? b.recv.data() : b.send.data();
      reduction_input(in, n, 0);
      status = comm.AllReduce(d(in), d(b.recv.data()), n, t, c.op, options);
      break;
    }
    case CollectiveKind::kBroadcast: {
      b.Resize(n, n);
      expect_moved(0, n, c.root, 0);
      uint8_t* in = c.in_place ? b.recv.data() : b.send.data();
      if (is_root) moved_input(in, n, r, 0);
      status = comm.Broadcast(d(is_root || c.in_place ? in : nullptr), d(b.recv.data()), n, t,
                              c.root, options);
      break;
    }
    case CollectiveKind::kReduce: {
      b.Resize(n, n);
      if (is_root) expect_reduction(0, n, 0);
      uint8_t* in = c.in_place && is_root ? b.recv.data() : b.send.data();
      reduction_input(in, n, 0);
      status = comm.Reduce(d(in), d(is_root || !c.in_place ? b.recv.data() : nullptr), n, t, c.op,
                           c.root, options);
      break;
    }
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllGatherV: {
      const std::vector<size_t> counts =
          c.kind == CollectiveKind::kAllGather ? std::vector<size_t>(p, n) : VCounts(n, p);
      const std::vector<size_t> offsets = Packed(counts);
      b.Resize(counts[r], Total(counts));
      for (int q = 0; q < p; ++q) expect_moved(offsets[q], counts[q], q, 0);
      uint8_t* in = c.in_place ? b.recv_at(offsets[r]) : b.send.data();
      moved_input(in, counts[r], r, 0);
      status = c.kind == CollectiveKind::kAllGather
                   ? comm.AllGather(d(in), d(b.recv.data()), n, t, options)
                   : comm.AllGatherV(d(in), d(b.recv.data()), counts, t, options);
      break;
    }
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kReduceScatterV: {
      const std::vector<size_t> counts =
          c.kind == CollectiveKind::kReduceScatter ? std::vector<size_t>(p, n) : VCounts(n, p);
      const std::vector<size_t> offsets = Packed(counts);
      const size_t total = Total(counts);
      if (c.in_place) {
        // The whole array is the buffer; only this rank's block of it is defined afterwards.
        b.Resize(0, total);
        reduction_input(b.recv.data(), total, 0);
        b.expected = b.recv;
        expect_reduction(offsets[r], counts[r], offsets[r]);
        check_from = offsets[r] * b.elem;
        b.expected.resize((offsets[r] + counts[r]) * b.elem);
        uint8_t* out = b.recv_at(offsets[r]);
        status = c.kind == CollectiveKind::kReduceScatter
                     ? comm.ReduceScatter(d(b.recv.data()), d(out), n, t, c.op, options)
                     : comm.ReduceScatterV(d(b.recv.data()), d(out), counts, t, c.op, options);
      } else {
        b.Resize(total, counts[r]);
        reduction_input(b.send.data(), total, 0);
        expect_reduction(0, counts[r], offsets[r]);
        status =
            c.kind == CollectiveKind::kReduceScatter
                ? comm.ReduceScatter(d(b.send.data()), d(b.recv.data()), n, t, c.op, options)
                : comm.ReduceScatterV(d(b.send.data()), d(b.recv.data()), counts, t, c.op, options);
      }
      break;
    }
    case CollectiveKind::kGather:
    case CollectiveKind::kGatherV: {
      const bool v = c.kind == CollectiveKind::kGatherV;
      const std::vector<size_t> counts = v ? VCounts(n, p) : std::vector<size_t>(p, n);
      const std::vector<size_t> displs = v ? Gapped(counts) : Packed(counts);
      const size_t end = v ? End(displs, counts) : p * n;
      b.Resize(counts[r], is_root ? end : 0);
      if (is_root) {
        for (int q = 0; q < p; ++q) expect_moved(displs[q], counts[q], q, 0);
      }
      uint8_t* in = c.in_place && is_root ? b.recv_at(displs[r]) : b.send.data();
      moved_input(in, counts[r], r, 0);
      void* out = is_root ? b.recv.data() : nullptr;
      status = v ? comm.GatherV(d(in), counts[r], d(out), counts, displs, t, c.root, options)
                 : comm.Gather(d(in), d(out), n, t, c.root, options);
      break;
    }
    case CollectiveKind::kScatter:
    case CollectiveKind::kScatterV: {
      const bool v = c.kind == CollectiveKind::kScatterV;
      const std::vector<size_t> counts = v ? VCounts(n, p) : std::vector<size_t>(p, n);
      const std::vector<size_t> displs = v ? Gapped(counts) : Packed(counts);
      const size_t end = v ? End(displs, counts) : p * n;
      const bool root_in_place = c.in_place && is_root;
      b.Resize(is_root ? end : 0, root_in_place ? end : counts[r]);
      if (root_in_place) {
        moved_input(b.recv.data(), end, r, 0);
        b.expected = b.recv;  // the root's block stays where it is
      } else {
        if (is_root) moved_input(b.send.data(), end, r, 0);
        expect_moved(0, counts[r], c.root, displs[r]);
      }
      const uint8_t* in = root_in_place ? b.recv.data() : b.send.data();
      uint8_t* out = root_in_place ? b.recv_at(displs[r]) : b.recv.data();
      status = v ? comm.ScatterV(d(is_root ? in : nullptr), counts, displs, d(out), counts[r], t,
                                 c.root, options)
                 : comm.Scatter(d(is_root ? in : nullptr), d(out), n, t, c.root, options);
      break;
    }
    case CollectiveKind::kAllToAll: {
      b.Resize(p * n, p * n);
      for (int q = 0; q < p; ++q) expect_moved(q * n, n, q, r * n);
      uint8_t* in = c.in_place ? b.recv.data() : b.send.data();
      moved_input(in, p * n, r, 0);
      status = comm.AllToAll(d(in), d(b.recv.data()), n, t, options);
      break;
    }
    case CollectiveKind::kAllToAllV: {
      std::vector<size_t> send_counts(p);
      std::vector<size_t> recv_counts(p);
      for (int q = 0; q < p; ++q) {
        send_counts[q] = AllToAllVCount(n, r, q, c.in_place);
        recv_counts[q] = AllToAllVCount(n, q, r, c.in_place);
      }
      const std::vector<size_t> send_displs = Gapped(send_counts);
      const std::vector<size_t> recv_displs = Gapped(recv_counts);
      b.Resize(End(send_displs, send_counts), End(recv_displs, recv_counts));
      uint8_t* in = c.in_place ? b.recv.data() : b.send.data();
      moved_input(in, (c.in_place ? b.recv.size() : b.send.size()) / b.elem, r, 0);
      if (c.in_place) b.expected = b.recv;  // the gaps keep this rank's own values
      for (int q = 0; q < p; ++q) {
        // Rank q sent this rank the block at its own send displacement for us.
        std::vector<size_t> q_counts(p);
        for (int d = 0; d < p; ++d) q_counts[d] = AllToAllVCount(n, q, d, c.in_place);
        expect_moved(recv_displs[q], recv_counts[q], q, Gapped(q_counts)[r]);
      }
      status = comm.AllToAllV(d(in), send_counts, send_displs, d(b.recv.data()), recv_counts,
                              recv_displs, t, options);
      break;
    }
    case CollectiveKind::kBarrier:
      status = comm.Barrier(options);
      break;
    default:
      return InternalError(absl::StrCat("no test for ", c.Describe()));
  }
  if (!status.ok()) return Annotate(status, absl::StrCat(c.Describe(), " on rank ", r));
  CHORUS_RETURN_IF_ERROR(d.status());
  CHORUS_RETURN_IF_ERROR(d.Download());
  return Compare(c, r, b.recv, b.expected, check_from);
}

absl::Status RunCases(Communicator& comm, const std::vector<Case>& cases,
                      const CaseMemory& memory) {
  for (const Case& c : cases) CHORUS_RETURN_IF_ERROR(RunCase(comm, c, memory));
  return absl::OkStatus();
}

}  // namespace chorus::testing
