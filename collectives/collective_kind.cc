#include "chorus/collectives/collective_kind.h"

#include <array>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chorus/core/status.h"

namespace chorus {
namespace {

constexpr std::array<absl::string_view, kNumAlgorithmIds> kAlgorithmNames = {
    "none",         "ring",         "recursive_doubling",
    "rabenseifner", "binomial",     "double_binary_tree",
    "pairwise",     "linear",       "dissemination",
    "direct",       "hierarchical", "cuda_ipc",
    "shared_slots"};

}  // namespace

absl::string_view AlgorithmName(AlgorithmId id) { return kAlgorithmNames[static_cast<size_t>(id)]; }

absl::StatusOr<AlgorithmId> ParseAlgorithmName(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(name));
  for (int i = 1; i < kNumAlgorithmIds; ++i) {
    if (kAlgorithmNames[i] == lower) return static_cast<AlgorithmId>(i);
  }
  return InvalidArgumentError(absl::StrCat(
      "unknown algorithm '", name,
      "'; known: ", absl::StrJoin(kAlgorithmNames.begin() + 1, kAlgorithmNames.end(), ", ")));
}

bool IsValidCollectiveKind(uint8_t value) { return value < kNumCollectiveKinds; }
bool IsValidAlgorithmId(uint8_t value) { return value < kNumAlgorithmIds; }

}  // namespace chorus
