#include "chorus/collectives/engine/header.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "chorus/collectives/shape.h"
#include "chorus/core/status.h"

namespace chorus {
namespace {

constexpr uint8_t kVersion = 1;

uint64_t DigestCounts(const std::vector<size_t>& counts) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t count : counts) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (count >> (8 * byte)) & 0xff;
      hash *= 0x100000001b3ull;
    }
  }
  return hash;
}

template <typename T>
void Put(uint8_t* out, T value) {
  std::memcpy(out, &value, sizeof(T));  // x86-64 is little-endian, the wire order
}

template <typename T>
T Take(const uint8_t* in) {
  T value;
  std::memcpy(&value, in, sizeof(T));
  return value;
}

}  // namespace

std::string HumanBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0 || value == static_cast<double>(static_cast<uint64_t>(value))) {
    return absl::StrCat(static_cast<uint64_t>(value), " ", kUnits[unit]);
  }
  return absl::StrCat(absl::StrFormat("%.1f", value), " ", kUnits[unit]);
}

CollectiveHeader CollectiveHeader::For(const CollectiveArgs& args, AlgorithmId algorithm,
                                       uint32_t sequence, int ranks, uint64_t layout) {
  CollectiveHeader header;
  header.kind = args.kind;
  header.type = args.type;
  header.op = IsReduction(args.kind) ? args.op : ReduceOp::kSum;
  header.algorithm = algorithm;
  header.root = IsRooted(args.kind) ? args.root : -1;
  header.sequence = sequence;
  header.ranks = static_cast<uint32_t>(ranks);
  switch (AgreedCounts(args.kind)) {
    case Agreement::kCount:
      header.count = args.count;
      break;
    case Agreement::kCounts:
      header.count = PayloadBytes(args, ranks) / args.elem();
      header.shape = DigestCounts(args.counts);
      break;
    case Agreement::kNone:
      break;
  }
  header.shape ^= layout;
  return header;
}

bool SameWire(const CollectiveHeader::Wire& mine, const uint8_t* wire, size_t bytes) {
  return bytes == mine.size() && std::memcmp(wire, mine.data(), mine.size()) == 0;
}

CollectiveHeader::Wire CollectiveHeader::Encode() const {
  Wire wire{};
  wire[0] = kVersion;
  wire[1] = static_cast<uint8_t>(kind);
  wire[2] = static_cast<uint8_t>(type);
  wire[3] = static_cast<uint8_t>(op);
  wire[4] = static_cast<uint8_t>(algorithm);
  Put<int32_t>(&wire[8], root);
  Put<uint32_t>(&wire[12], sequence);
  Put<uint32_t>(&wire[16], ranks);
  Put<uint64_t>(&wire[24], count);
  Put<uint64_t>(&wire[32], shape);
  return wire;
}

absl::StatusOr<CollectiveHeader> CollectiveHeader::Decode(const uint8_t* data, size_t size) {
  if (size != kWireSize || data[0] != kVersion || !IsValidCollectiveKind(data[1]) ||
      !IsValidDataType(data[2]) || !IsValidReduceOp(data[3]) || !IsValidAlgorithmId(data[4])) {
    return InvalidArgumentError(absl::StrCat("not a collective header (", size, " bytes, version ",
                                             size > 0 ? data[0] : 0, ")"));
  }
  CollectiveHeader header;
  header.kind = static_cast<CollectiveKind>(data[1]);
  header.type = static_cast<DataType>(data[2]);
  header.op = static_cast<ReduceOp>(data[3]);
  header.algorithm = static_cast<AlgorithmId>(data[4]);
  header.root = Take<int32_t>(data + 8);
  header.sequence = Take<uint32_t>(data + 12);
  header.ranks = Take<uint32_t>(data + 16);
  header.count = Take<uint64_t>(data + 24);
  header.shape = Take<uint64_t>(data + 32);
  return header;
}

std::string CollectiveHeader::Describe() const {
  std::vector<std::string> parts = {std::string(AlgorithmName(algorithm))};
  if (kind != CollectiveKind::kBarrier) {
    parts.push_back(absl::StrCat(count, " x ", DataTypeName(type), " (",
                                 HumanBytes(count * DataTypeSize(type)), ")"));
  }
  if (IsReduction(kind)) parts.push_back(std::string(ReduceOpName(op)));
  if (IsRooted(kind)) parts.push_back(absl::StrCat("root ", root));
  return absl::StrCat(CollectiveKindName(kind), " #", sequence, " (", absl::StrJoin(parts, ", "),
                      ")");
}

std::string CollectiveHeader::Differences(const CollectiveHeader& other) const {
  std::vector<std::string> diffs;
  auto note = [&diffs](absl::string_view field, auto mine, auto theirs) {
    if (mine != theirs) diffs.push_back(absl::StrCat(field, " ", mine, " vs ", theirs));
  };
  if (kind != other.kind) {
    diffs.push_back(absl::StrCat("collective ", CollectiveKindName(kind), " vs ",
                                 CollectiveKindName(other.kind)));
  }
  note("sequence", sequence, other.sequence);
  note("ranks", ranks, other.ranks);
  if (algorithm != other.algorithm) {
    diffs.push_back(absl::StrCat("algorithm ", AlgorithmName(algorithm), " vs ",
                                 AlgorithmName(other.algorithm),
                                 " (check the counts, CHORUS_ALGO, CHORUS_SHARED_SLOTS and "
                                 "per-call options on both ranks)"));
  }
  if (type != other.type) {
    diffs.push_back(absl::StrCat("type ", DataTypeName(type), " vs ", DataTypeName(other.type)));
  }
  if (op != other.op) {
    diffs.push_back(absl::StrCat("op ", ReduceOpName(op), " vs ", ReduceOpName(other.op)));
  }
  note("root", root, other.root);
  note("count", count, other.count);
  if (shape != other.shape) {
    // Collectives without per-rank counts have a shape only when staged in segments.
    const bool elementwise = IsElementwise(kind);
    const char* staging =
        "one rank stages CUDA device buffers in segments and the other does not, or in segments "
        "of another size (pass device buffers on every rank or on none, with the same "
        "CHORUS_CUDA_STAGING_SEGMENT_BYTES)";
    const char* layouts = "(check CommunicatorOptions::host_of_rank on both ranks)";
    if (algorithm == AlgorithmId::kHierarchical) {
      diffs.push_back(elementwise
                          ? absl::StrCat("host layouts differ ", layouts, ", or ", staging)
                          : absl::StrCat("per-rank counts or host layouts differ ", layouts));
    } else {
      diffs.push_back(elementwise ? staging : "per-rank counts differ");
    }
  }
  return absl::StrJoin(diffs, ", ");
}

}  // namespace chorus
