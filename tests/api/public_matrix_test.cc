// The correctness matrix through the public C++ API on the static libchorus.a: every collective,
// blocking and asynchronous, every algorithm name (and the automatic choice), every data type and
// operator, counts 0, 1, 7 and 1000, in place where the API defines it (AllReduce, Broadcast,
// Reduce, AllGather), every root, on 1 to 4 rank threads over one file store and TCP. Inputs are
// small integers, so every reduction is exact in every type (float16 and bfloat16 included; avg
// rounds once, as the library must); outputs are poisoned first and every byte is checked,
// including the gaps a v-collective must not write and the inputs an out-of-place call must
// leave alone. The expected values are computed here, from the public types only.
#include <stdlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "chorus/chorus.h"

namespace {

using chorus::CallOptions;
using chorus::DataType;
using chorus::ReduceOp;
using chorus::Status;

enum class Coll {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kAllGatherV,
  kReduceScatter,
  kReduceScatterV,
  kGather,
  kGatherV,
  kScatter,
  kScatterV,
  kAllToAll,
  kAllToAllV,
  kBarrier,
};

struct CollInfo {
  Coll coll;
  const char* name;
  bool reduces, rooted, in_place;       // in_place: the API defines an in-place form
  std::vector<std::string> algorithms;  // docs/collectives.md; "" is the automatic choice
};

const std::vector<CollInfo>& Collectives() {
  // clang-format off
  static const std::vector<CollInfo> kAll = {
      {Coll::kAllReduce, "allreduce", true, false, true,
       {"", "recursive_doubling", "ring", "rabenseifner", "double_binary_tree", "binomial",
        "hierarchical"}},
      {Coll::kBroadcast, "broadcast", false, true, true,
       {"", "binomial", "double_binary_tree", "hierarchical"}},
      {Coll::kReduce, "reduce", true, true, true,
       {"", "binomial", "double_binary_tree", "hierarchical"}},
      {Coll::kAllGather, "allgather", false, false, true,
       {"", "recursive_doubling", "ring", "hierarchical"}},
      {Coll::kAllGatherV, "allgatherv", false, false, false,
       {"", "recursive_doubling", "ring", "hierarchical"}},
      {Coll::kReduceScatter, "reduce_scatter", true, false, false,
       {"", "rabenseifner", "ring", "hierarchical"}},
      {Coll::kReduceScatterV, "reduce_scatterv", true, false, false,
       {"", "rabenseifner", "ring", "hierarchical"}},
      {Coll::kGather, "gather", false, true, false, {"", "linear"}},
      {Coll::kGatherV, "gatherv", false, true, false, {"", "linear"}},
      {Coll::kScatter, "scatter", false, true, false, {"", "linear"}},
      {Coll::kScatterV, "scatterv", false, true, false, {"", "linear"}},
      {Coll::kAllToAll, "alltoall", false, false, false, {"", "pairwise"}},
      {Coll::kAllToAllV, "alltoallv", false, false, false, {"", "pairwise"}},
      {Coll::kBarrier, "barrier", false, false, false, {"", "dissemination"}},
  };
  // clang-format on
  return kAll;
}

const DataType kTypes[] = {DataType::kInt8,    DataType::kUint8,    DataType::kInt16,
                           DataType::kUint16,  DataType::kInt32,    DataType::kUint32,
                           DataType::kInt64,   DataType::kUint64,   DataType::kFloat16,
                           DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};
const char* const kTypeNames[] = {"int8",    "uint8",  "int16",   "uint16",
                                  "int32",   "uint32", "int64",   "uint64",
                                  "float16", "bfloat16", "float32", "float64"};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                         ReduceOp::kAvg};
const char* const kOpNames[] = {"sum", "prod", "min", "max", "avg"};
const size_t kCounts[] = {0, 1, 7, 1000};
constexpr uint8_t kPoison = 0x5a;

bool IsUnsigned(DataType t) {
  return t == DataType::kUint8 || t == DataType::kUint16 || t == DataType::kUint32 ||
         t == DataType::kUint64;
}
bool IsFloat(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 ||
         t == DataType::kFloat64;
}

// binary32 -> binary16 / bfloat16, rounding to nearest even (normal numbers and zero: all this
// test's values are).
uint16_t HalfBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000, mant = x & 0x7fffff;
  if ((x & 0x7fffffff) == 0) return static_cast<uint16_t>(sign);
  uint32_t h = ((((x >> 23) & 0xff) - 127 + 15) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}
uint16_t BFloatBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return static_cast<uint16_t>((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}
float HalfValue(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const float mag = exp == 0 ? std::ldexp(static_cast<float>(h & 0x3ff), -24)
                             : std::ldexp(static_cast<float>((h & 0x3ff) | 0x400), exp - 25);
  return h & 0x8000 ? -mag : mag;
}

// Writes `v` (representable in `t`, or rounded once for the floats) at element `i` of `base`.
void Put(DataType t, uint8_t* base, size_t i, double v) {
  uint8_t* at = base + i * chorus::DataTypeSize(t);
  auto store = [at](auto value) { std::memcpy(at, &value, sizeof(value)); };
  switch (t) {
    case DataType::kInt8:
      return store(static_cast<int8_t>(v));
    case DataType::kUint8:
      return store(static_cast<uint8_t>(v));
    case DataType::kInt16:
      return store(static_cast<int16_t>(v));
    case DataType::kUint16:
      return store(static_cast<uint16_t>(v));
    case DataType::kInt32:
      return store(static_cast<int32_t>(v));
    case DataType::kUint32:
      return store(static_cast<uint32_t>(v));
    case DataType::kInt64:
      return store(static_cast<int64_t>(v));
    case DataType::kUint64:
      return store(static_cast<uint64_t>(v));
    case DataType::kFloat16:
      return store(HalfBits(static_cast<float>(v)));
    case DataType::kBFloat16:
      return store(BFloatBits(static_cast<float>(v)));
    case DataType::kFloat32:
      return store(static_cast<float>(v));
    case DataType::kFloat64:
      return store(v);
  }
}

// Element `i` of `base` as text, for failure messages.
std::string Show(DataType t, const uint8_t* base, size_t i) {
  const uint8_t* at = base + i * chorus::DataTypeSize(t);
  auto load = [at](auto value) {
    std::memcpy(&value, at, sizeof(value));
    return value;
  };
  std::ostringstream text;
  switch (t) {
    case DataType::kInt8:
      text << int{load(int8_t{})};
      break;
    case DataType::kUint8:
      text << int{load(uint8_t{})};
      break;
    case DataType::kInt16:
      text << int{load(int16_t{})};
      break;
    case DataType::kUint16:
      text << int{load(uint16_t{})};
      break;
    case DataType::kInt32:
      text << load(int32_t{});
      break;
    case DataType::kUint32:
      text << load(uint32_t{});
      break;
    case DataType::kInt64:
      text << load(int64_t{});
      break;
    case DataType::kUint64:
      text << load(uint64_t{});
      break;
    case DataType::kFloat16:
      text << HalfValue(load(uint16_t{}));
      break;
    case DataType::kBFloat16: {
      const uint32_t bits = uint32_t{load(uint16_t{})} << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      text << f;
      break;
    }
    case DataType::kFloat32:
      text << load(float{});
      break;
    case DataType::kFloat64:
      text << load(double{});
      break;
  }
  return text.str();
}

// Reduction inputs: in [-5, 5] (unsigned [0, 10]); for prod 1 or 2, some negated, so that 4
// ranks' sums stay within int8 and products are powers of two up to 16: exact everywhere.
double ReductionInput(DataType t, ReduceOp op, int rank, size_t i) {
  if (op == ReduceOp::kProd) {
    const double v = (i + 2 * rank) % 3 == 1 ? 2 : 1;
    return !IsUnsigned(t) && (3 * i + rank) % 5 == 2 ? -v : v;
  }
  const double v = static_cast<double>((i * 4 + static_cast<size_t>(rank) * 9 + 3) % 11);
  return IsUnsigned(t) ? v : v - 5;
}

// The reduction over `ranks` ranks; avg divides once in the element type (integers truncate).
double Reduced(DataType t, ReduceOp op, int ranks, size_t i) {
  double acc = ReductionInput(t, op, 0, i);
  for (int q = 1; q < ranks; ++q) {
    const double v = ReductionInput(t, op, q, i);
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc += v;
    if (op == ReduceOp::kProd) acc *= v;
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
  }
  if (op != ReduceOp::kAvg) return acc;
  if (t == DataType::kFloat64) return acc / ranks;
  if (IsFloat(t)) return static_cast<float>(acc) / static_cast<float>(ranks);
  return std::trunc(acc / ranks);
}

// Data-movement inputs: distinct per rank and position (period 241), within every type.
double MovedInput(DataType t, int rank, size_t i) {
  const double v = static_cast<double>((i * 11 + static_cast<size_t>(rank) * 37 + 5) % 241);
  return IsUnsigned(t) ? v : v - 120;
}

struct Case {
  const CollInfo* info;
  std::string algorithm;
  DataType type;
  int type_index;
  int op_index;
  size_t count;
  bool in_place;
  bool async;
  int root;

  ReduceOp op() const { return kOps[op_index]; }
  std::string Describe() const {
    std::ostringstream text;
    text << info->name << "[" << (algorithm.empty() ? "auto" : algorithm) << ", "
         << kTypeNames[type_index] << ", " << (info->reduces ? kOpNames[op_index] : "-")
         << ", count " << count << (in_place ? ", in place" : ", out of place")
         << (async ? ", async" : ", blocking");
    if (info->rooted) text << ", root " << root;
    text << "]";
    return text.str();
  }
};

// Every case for `ranks` ranks, the same list on every rank.
std::vector<Case> BuildCases(int ranks) {
  std::vector<Case> cases;
  for (const CollInfo& info : Collectives()) {
    const bool barrier = info.coll == Coll::kBarrier;
    for (const std::string& algorithm : info.algorithms) {
      for (int t = 0; t < (barrier ? 1 : 10); ++t) {
        for (int o = 0; o < (info.reduces ? 5 : 1); ++o) {
          for (size_t count : kCounts) {
            if (barrier && count != 0) continue;
            for (bool in_place : {false, true}) {
              if (in_place && !info.in_place) continue;
              for (bool async : {false, true}) {
                for (int root = 0; root < (info.rooted ? ranks : 1); ++root) {
                  cases.push_back(
                      {&info, algorithm, kTypes[t], t, o, count, in_place, async, root});
                }
              }
            }
          }
        }
      }
    }
  }
  return cases;
}

// Per-rank counts of the v-collectives: uneven, some empty.
std::vector<size_t> VCounts(size_t n, int ranks) {
  std::vector<size_t> counts(ranks);
  for (int q = 0; q < ranks; ++q) counts[q] = q % 3 == 1 ? 0 : n + 2 * q;
  return counts;
}
// Displacements: packed, or with one poisoned element before each block (`gap`).
std::vector<size_t> Displs(const std::vector<size_t>& counts, bool gap) {
  std::vector<size_t> displs(counts.size());
  size_t at = 0;
  for (size_t q = 0; q < counts.size(); ++q) {
    displs[q] = at + (gap ? 1 : 0);
    at = displs[q] + counts[q];
  }
  return displs;
}
size_t Extent(const std::vector<size_t>& counts, const std::vector<size_t>& displs) {
  size_t end = 0;
  for (size_t q = 0; q < counts.size(); ++q) end = std::max(end, displs[q] + counts[q]);
  return end + 1;  // a poisoned element after the last block too
}
// Elements rank `from` sends rank `to` in alltoallv.
size_t AllToAllVCount(size_t n, int from, int to) {
  return (from + 3 * to) % 4 == 2 ? 0 : n + (from + 2 * to) % 3;
}

// One rank's run of one case: returns "" or what went wrong.
std::string RunCase(chorus::Communicator& comm, const Case& c) {
  const int p = comm.size(), r = comm.rank();
  const size_t n = c.count, elem = chorus::DataTypeSize(c.type);
  const DataType t = c.type;
  const bool is_root = r == c.root;
  // send: this rank's input; recv: poisoned output; want: what recv must hold afterwards.
  std::vector<uint8_t> send, recv, want;
  auto shape = [&](size_t send_elems, size_t recv_elems) {
    send.assign(send_elems * elem, kPoison);
    recv.assign(recv_elems * elem, kPoison);
    want.assign(recv_elems * elem, kPoison);
  };
  auto fill_reduction = [&](std::vector<uint8_t>& v, size_t at, size_t elems, size_t first) {
    for (size_t i = 0; i < elems; ++i) {
      Put(t, v.data(), at + i, ReductionInput(t, c.op(), r, first + i));
    }
  };
  auto want_reduction = [&](size_t at, size_t elems, size_t first) {
    for (size_t i = 0; i < elems; ++i) {
      Put(t, want.data(), at + i, Reduced(t, c.op(), p, first + i));
    }
  };
  auto fill_moved = [&](std::vector<uint8_t>& v, size_t at, size_t elems, int rank, size_t first) {
    for (size_t i = 0; i < elems; ++i) Put(t, v.data(), at + i, MovedInput(t, rank, first + i));
  };
  auto at = [&](std::vector<uint8_t>& v, size_t index) { return v.data() + index * elem; };
  auto or_null = [](bool use, void* buffer) { return use ? buffer : nullptr; };

  CallOptions options;
  options.algorithm = c.algorithm;
  // Runs the blocking or the asynchronous form of a collective, as the case says.
  // The inputs are kept to check that an out-of-place call leaves them alone.
  std::vector<uint8_t> sent;
  auto call = [&](auto blocking, auto async) -> Status {
    sent = send;
    return c.async ? async().Wait() : blocking();
  };
#define CHORUS_CALL(Method, ...)                          \
  call([&] { return comm.Method(__VA_ARGS__, options); }, \
       [&] { return comm.Method##Async(__VA_ARGS__, options); })

  Status status;
  switch (c.info->coll) {
    case Coll::kAllReduce: {
      shape(n, n);
      fill_reduction(c.in_place ? recv : send, 0, n, 0);
      want_reduction(0, n, 0);
      void* in = c.in_place ? recv.data() : send.data();
      status = CHORUS_CALL(AllReduce, in, recv.data(), n, t, c.op());
      break;
    }
    case Coll::kBroadcast: {
      shape(n, n);
      if (is_root) fill_moved(c.in_place ? recv : send, 0, n, r, 0);
      fill_moved(want, 0, n, c.root, 0);
      void* in = c.in_place ? recv.data() : or_null(is_root, send.data());
      status = CHORUS_CALL(Broadcast, in, recv.data(), n, t, c.root);
      break;
    }
    case Coll::kReduce: {
      // Off the root: out of place, recv is given and must stay untouched; in place, it is null.
      shape(n, n);
      const bool root_in_place = c.in_place && is_root;
      fill_reduction(root_in_place ? recv : send, 0, n, 0);
      if (is_root) want_reduction(0, n, 0);
      void* in = root_in_place ? recv.data() : send.data();
      status = CHORUS_CALL(Reduce, in, or_null(is_root || !c.in_place, recv.data()), n, t, c.op(),
                           c.root);
      break;
    }
    case Coll::kAllGather:
    case Coll::kAllGatherV: {
      const bool v = c.info->coll == Coll::kAllGatherV;
      const std::vector<size_t> counts = v ? VCounts(n, p) : std::vector<size_t>(p, n);
      const std::vector<size_t> displs = Displs(counts, false);
      shape(counts[r], displs.back() + counts.back());
      for (int q = 0; q < p; ++q) fill_moved(want, displs[q], counts[q], q, 0);
      fill_moved(c.in_place ? recv : send, c.in_place ? displs[r] : 0, counts[r], r, 0);
      void* in = c.in_place ? at(recv, displs[r]) : send.data();
      status = v ? CHORUS_CALL(AllGatherV, in, recv.data(), counts, t)
                 : CHORUS_CALL(AllGather, in, recv.data(), n, t);
      break;
    }
    case Coll::kReduceScatter:
    case Coll::kReduceScatterV: {
      const bool v = c.info->coll == Coll::kReduceScatterV;
      const std::vector<size_t> counts = v ? VCounts(n, p) : std::vector<size_t>(p, n);
      const std::vector<size_t> displs = Displs(counts, false);
      shape(displs.back() + counts.back(), counts[r]);
      fill_reduction(send, 0, send.size() / elem, 0);
      want_reduction(0, counts[r], displs[r]);
      status = v ? CHORUS_CALL(ReduceScatterV, send.data(), recv.data(), counts, t, c.op())
                 : CHORUS_CALL(ReduceScatter, send.data(), recv.data(), n, t, c.op());
      break;
    }
    case Coll::kGather:
    case Coll::kGatherV: {
      // The root's gapped layout (v) must keep its gaps; counts and displs are root-only.
      const bool v = c.info->coll == Coll::kGatherV;
      const std::vector<size_t> counts = v ? VCounts(n, p) : std::vector<size_t>(p, n);
      const std::vector<size_t> displs = Displs(counts, v);
      shape(counts[r], is_root ? (v ? Extent(counts, displs) : p * n) : 0);
      fill_moved(send, 0, counts[r], r, 0);
      if (is_root) {
        for (int q = 0; q < p; ++q) fill_moved(want, displs[q], counts[q], q, 0);
      }
      void* out = or_null(is_root, recv.data());
      const std::vector<size_t> none;
      status = v ? CHORUS_CALL(GatherV, send.data(), counts[r], out, is_root ? counts : none,
                               is_root ? displs : none, t, c.root)
                 : CHORUS_CALL(Gather, send.data(), out, n, t, c.root);
      break;
    }
    case Coll::kScatter:
    case Coll::kScatterV: {
      const bool v = c.info->coll == Coll::kScatterV;
      const std::vector<size_t> counts = v ? VCounts(n, p) : std::vector<size_t>(p, n);
      const std::vector<size_t> displs = Displs(counts, v);
      shape(is_root ? (v ? Extent(counts, displs) : p * n) : 0, counts[r]);
      if (is_root) fill_moved(send, 0, send.size() / elem, r, 0);
      fill_moved(want, 0, counts[r], c.root, displs[r]);
      const void* in = or_null(is_root, send.data());
      const std::vector<size_t> none;
      status = v ? CHORUS_CALL(ScatterV, in, is_root ? counts : none, is_root ? displs : none,
                               recv.data(), counts[r], t, c.root)
                 : CHORUS_CALL(Scatter, in, recv.data(), n, t, c.root);
      break;
    }
    case Coll::kAllToAll: {
      shape(p * n, p * n);
      fill_moved(send, 0, p * n, r, 0);
      for (int q = 0; q < p; ++q) fill_moved(want, q * n, n, q, r * n);
      status = CHORUS_CALL(AllToAll, send.data(), recv.data(), n, t);
      break;
    }
    case Coll::kAllToAllV: {
      // Gapped on both sides; rank q's block for this rank sits at q's own send displacement.
      auto send_counts_of = [&](int q) {
        std::vector<size_t> counts(p);
        for (int d = 0; d < p; ++d) counts[d] = AllToAllVCount(n, q, d);
        return counts;
      };
      const std::vector<size_t> send_counts = send_counts_of(r);
      std::vector<size_t> recv_counts(p);
      for (int q = 0; q < p; ++q) recv_counts[q] = AllToAllVCount(n, q, r);
      const std::vector<size_t> send_displs = Displs(send_counts, true);
      const std::vector<size_t> recv_displs = Displs(recv_counts, true);
      shape(Extent(send_counts, send_displs), Extent(recv_counts, recv_displs));
      fill_moved(send, 0, send.size() / elem, r, 0);
      for (int q = 0; q < p; ++q) {
        fill_moved(want, recv_displs[q], recv_counts[q], q, Displs(send_counts_of(q), true)[r]);
      }
      status = CHORUS_CALL(AllToAllV, send.data(), send_counts, send_displs, recv.data(),
                           recv_counts, recv_displs, t);
      break;
    }
    case Coll::kBarrier:
      status = c.async ? comm.BarrierAsync(options).Wait() : comm.Barrier(options);
      break;
  }
#undef CHORUS_CALL
  if (!status.ok()) return "error: " + status.ToString();
  if (send != sent && c.info->coll != Coll::kBarrier) return "the input was written";
  // Once per named algorithm: the flight recorder's newest record says it ran.
  if (!c.algorithm.empty() && c.type_index == 0 && c.op_index == 0 && c.count == 7 && !c.in_place &&
      !c.async && c.root == 0) {
    const std::string dump = comm.FlightRecorderDump();
    const std::string newest = dump.substr(dump.rfind("\n  ", dump.size() - 2) + 1);
    if (dump.find("flight recorder off") == std::string::npos &&
        newest.find("(" + c.algorithm + ",") == std::string::npos &&
        newest.find("(" + c.algorithm + ")") == std::string::npos) {
      return "ran another algorithm: " + newest;
    }
  }
  if (recv != want) {
    for (size_t i = 0; i * elem < recv.size(); ++i) {
      if (std::memcmp(at(recv, i), at(want, i), elem) != 0) {
        const bool gap =
            std::all_of(at(want, i), at(want, i) + elem, [](uint8_t b) { return b == kPoison; });
        return "element " + std::to_string(i) + " is " + Show(t, recv.data(), i) + ", expected " +
               Show(t, want.data(), i) + (gap ? " (must not be written)" : "");
      }
    }
  }
  return "";
}

// Runs every case of `ranks` ranks on one thread per rank over a fresh file store; returns each
// rank's first failure ("" if none). A wrong value is noted and the run goes on, so the other
// ranks never wait; a failed call ends the rank's run.
std::vector<std::string> RunMatrix(int ranks, const std::vector<Case>& cases) {
  const char* base = getenv("TEST_TMPDIR");
  std::string dir = std::string(base ? base : "/tmp") + "/public_matrix_test.XXXXXX";
  REQUIRE(mkdtemp(dir.data()) != nullptr);
  std::vector<std::string> failures(ranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      std::string& failure = failures[rank];
      auto store = chorus::Store::Open("file://" + dir);
      auto device = chorus::Device::Create("tcp");
      if (!store.ok() || !device.ok()) return void(failure = "setup");
      chorus::CommunicatorOptions options;
      options.timeout_seconds = 30;
      auto comm = chorus::Communicator::Create(*store, "matrix", *device, rank, ranks, options);
      if (!comm.ok()) return void(failure = "Create: " + comm.status().ToString());
      for (const Case& c : cases) {
        const std::string wrong = RunCase(*comm, c);
        if (!wrong.empty() && failure.empty()) {
          failure = c.Describe() + " on rank " + std::to_string(rank) + ": " + wrong;
        }
        if (wrong.rfind("error: ", 0) == 0) return;
      }
      // A name the library does not know is refused on every rank, before anything starts.
      CallOptions unknown;
      unknown.algorithm = "no_such_algorithm";
      int32_t value = rank;
      const Status refused =
          comm->AllReduce(&value, &value, 1, DataType::kInt32, ReduceOp::kSum, unknown);
      if (refused.kind() != chorus::ErrorKind::kInvalidArgument && failure.empty()) {
        failure = "unknown algorithm: " + refused.ToString();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::system(("rm -rf '" + dir + "'").c_str());
  return failures;
}

void CheckMatrix(int ranks) {
  const std::vector<Case> cases = BuildCases(ranks);
  const std::vector<std::string> failures = RunMatrix(ranks, cases);
  INFO(cases.size() << " cases on " << ranks << " ranks");
  for (int rank = 0; rank < ranks; ++rank) {
    INFO("rank " << rank);
    CHECK(failures[rank] == "");
  }
}

TEST_CASE("public matrix, 1 rank", "[public_matrix]") { CheckMatrix(1); }
TEST_CASE("public matrix, 2 ranks", "[public_matrix]") { CheckMatrix(2); }
TEST_CASE("public matrix, 3 ranks", "[public_matrix]") { CheckMatrix(3); }
TEST_CASE("public matrix, 4 ranks", "[public_matrix]") { CheckMatrix(4); }

}  // namespace
