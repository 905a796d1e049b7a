#include "chorus/benchmarks/verify.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>

#include "chorus/core/half.h"

namespace chorus::bench {
namespace {

// splitmix64: cheap, and neighbouring indices get unrelated values, so a chunk written at the
// wrong offset does not match by accident.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t Hash(int rank, int64_t index) {
  return Mix((static_cast<uint64_t>(rank) << 40) ^ static_cast<uint64_t>(index));
}

// The largest input value of a sum, so that `ranks` of them fit in int8.
int64_t SumInputMax(int ranks) { return std::clamp<int64_t>(126 / ranks, 1, 3); }

// Rank `rank`'s contribution to element `index` of a reduction with `op` (all integers >= 0).
int64_t ReduceInput(ReduceOp op, int ranks, int rank, int64_t index) {
  switch (op) {
    case ReduceOp::kSum:
      return static_cast<int64_t>(Hash(rank, index) % (SumInputMax(ranks) + 1));
    case ReduceOp::kProd: {
      // One rank contributes a 2 to two thirds of the elements; everything else is 1, so the
      // product is 1 or 2 and a missing or doubled contribution changes it.
      const uint64_t h = Hash(-1, index);
      return (h % 3 != 0 && static_cast<int>((h >> 8) % ranks) == rank) ? 2 : 1;
    }
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return static_cast<int64_t>(Hash(rank, index) % 64);
    case ReduceOp::kAvg: {
      // base + 1 on every rank, except one rank has +1 more and another 1 less: the sum is
      // ranks * (base + 1), so the average is exact in every type.
      const uint64_t h = Hash(-1, index);
      const int64_t value = static_cast<int64_t>(h % 4) + 1;
      if (ranks < 2) return value;
      const int up = static_cast<int>((h >> 8) % ranks);
      const int down = (up + 1 + static_cast<int>((h >> 24) % (ranks - 1))) % ranks;
      return value + (rank == up ? 1 : 0) - (rank == down ? 1 : 0);
    }
  }
  return 0;
}

int64_t ReducedValue(ReduceOp op, int ranks, int64_t index) {
  int64_t result = ReduceInput(op, ranks, 0, index);
  for (int rank = 1; rank < ranks; ++rank) {
    const int64_t value = ReduceInput(op, ranks, rank, index);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        result += value;
        break;
      case ReduceOp::kProd:
        result *= value;
        break;
      case ReduceOp::kMin:
        result = std::min(result, value);
        break;
      case ReduceOp::kMax:
        result = std::max(result, value);
        break;
    }
  }
  return op == ReduceOp::kAvg ? result / ranks : result;
}

// A value that only depends on who owns it: broadcast, allgather and alltoall move data
// without combining it.
int64_t PlainInput(int rank, int64_t index) { return static_cast<int64_t>(Hash(rank, index) % 64); }

// Element conversions: every expected value is a small non-negative integer.
template <typename T>
T FromInteger(int64_t value) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(value));
  } else {
    return static_cast<T>(value);
  }
}

template <typename T>
bool Equals(T actual, int64_t expected) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return static_cast<float>(actual) == static_cast<float>(expected);
  } else {
    return actual == static_cast<T>(expected);
  }
}

template <typename T>
T Sentinel() {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return T::FromBits(0xffff);  // NaN
  } else if constexpr (std::is_floating_point_v<T>) {
    return std::numeric_limits<T>::quiet_NaN();
  } else if constexpr (std::is_signed_v<T>) {
    return T(-1);
  } else {
    return std::numeric_limits<T>::max();
  }
}

// Calls f(T{}) with the storage type of `type`.
template <typename F>
void VisitType(DataType type, F&& f) {
  switch (type) {
    case DataType::kInt8:
      return f(int8_t{});
    case DataType::kUint8:
      return f(uint8_t{});
    case DataType::kInt16:
      return f(int16_t{});
    case DataType::kUint16:
      return f(uint16_t{});
    case DataType::kInt32:
      return f(int32_t{});
    case DataType::kUint32:
      return f(uint32_t{});
    case DataType::kInt64:
      return f(int64_t{});
    case DataType::kUint64:
      return f(uint64_t{});
    case DataType::kFloat16:
      return f(Float16{});
    case DataType::kBFloat16:
      return f(BFloat16{});
    case DataType::kFloat32:
      return f(float{});
    case DataType::kFloat64:
      return f(double{});
  }
}

// Input element `index` of `rank` for the collective.
int64_t InputValue(const VerifySpec& spec, int rank, int64_t index) {
  const int64_t chunk = spec.count / spec.ranks;
  switch (spec.collective) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduce:
    case CollectiveKind::kReduceScatter:
      return ReduceInput(spec.op, spec.ranks, rank, index);
    case CollectiveKind::kAllGather:
      // Rank r's input is the r-th chunk of the gathered array.
      return PlainInput(rank, rank * chunk + index);
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kAllToAll:
      return PlainInput(rank, index);
    default:  // barrier, and what the benchmarks do not measure
      return 0;
  }
}

// Expected output element `index` of `rank`; nullopt where the output is undefined.
std::optional<int64_t> ExpectedValue(const VerifySpec& spec, int rank, int64_t index) {
  const int64_t chunk = spec.count / spec.ranks;
  switch (spec.collective) {
    case CollectiveKind::kAllReduce:
      return ReducedValue(spec.op, spec.ranks, index);
    case CollectiveKind::kReduce:
      if (rank != spec.root) return std::nullopt;
      return ReducedValue(spec.op, spec.ranks, index);
    case CollectiveKind::kReduceScatter:
      return ReducedValue(spec.op, spec.ranks, rank * chunk + index);
    case CollectiveKind::kAllGather:
      return PlainInput(static_cast<int>(index / chunk), index);
    case CollectiveKind::kBroadcast:
      return PlainInput(spec.root, index);
    case CollectiveKind::kAllToAll: {
      // Chunk j of rank r's output is chunk r of rank j's input.
      const int source = static_cast<int>(index / chunk);
      return PlainInput(source, rank * chunk + index % chunk);
    }
    default:  // barrier, and what the benchmarks do not measure
      return std::nullopt;
  }
}

}  // namespace

BufferElements BufferElementsFor(CollectiveKind collective, int64_t count, int ranks) {
  CollectiveArgs args = ArgsForArray(collective, static_cast<size_t>(count), ranks);
  args.root = 0;
  return ElementsOf(args, args.root, ranks);
}

void FillInput(const VerifySpec& spec, int rank, void* input) {
  const auto elements =
      static_cast<int64_t>(BufferElementsFor(spec.collective, spec.count, spec.ranks).send);
  VisitType(spec.type, [&](auto zero) {
    using T = decltype(zero);
    T* data = static_cast<T*>(input);
    for (int64_t i = 0; i < elements; ++i) data[i] = FromInteger<T>(InputValue(spec, rank, i));
  });
}

void FillSentinel(const VerifySpec& spec, void* output, int64_t elements) {
  VisitType(spec.type, [&](auto zero) {
    using T = decltype(zero);
    std::fill_n(static_cast<T*>(output), elements, Sentinel<T>());
  });
}

int64_t CountWrong(const VerifySpec& spec, int rank, const void* output) {
  const auto elements =
      static_cast<int64_t>(BufferElementsFor(spec.collective, spec.count, spec.ranks).recv);
  int64_t wrong = 0;
  VisitType(spec.type, [&](auto zero) {
    using T = decltype(zero);
    const T* data = static_cast<const T*>(output);
    for (int64_t i = 0; i < elements; ++i) {
      const std::optional<int64_t> expected = ExpectedValue(spec, rank, i);
      if (expected && !Equals(data[i], *expected)) ++wrong;
    }
  });
  return wrong;
}

}  // namespace chorus::bench
