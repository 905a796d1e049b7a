// A program with its own Abseil next to libchorus: it links the system's shared Abseil for its
// own printing (absl::StrFormat) and defines its own copies of Abseil functions that Chorus also
// uses (StrCat, CatPieces, Now), which abort when called. Chorus keeps its Abseil private, so
// its calls never reach these copies: the collectives and their error messages work.
//   clash_consumer STORE_URL RANK SIZE
#include <chorus/chorus.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace {

[[noreturn]] void Clash(const char* function) {
  std::fprintf(stderr, "the program's own absl::%s was called by libchorus\n", function);
  std::abort();
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN
std::string StrCat(const AlphaNum&, const AlphaNum&) { Clash("StrCat"); }
std::string StrCat(const AlphaNum&, const AlphaNum&, const AlphaNum&) { Clash("StrCat"); }
std::string StrCat(const AlphaNum&, const AlphaNum&, const AlphaNum&, const AlphaNum&) {
  Clash("StrCat");
}
namespace strings_internal {
std::string CatPieces(std::initializer_list<absl::string_view>) { Clash("CatPieces"); }
}  // namespace strings_internal
Time Now() { Clash("Now"); }
ABSL_NAMESPACE_END
}  // namespace absl

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  const int rank = std::atoi(argv[2]), size = std::atoi(argv[3]);
  auto store = chorus::Store::Open(argv[1]);
  auto device = chorus::Device::Create("tcp");
  if (!store.ok() || !device.ok()) return 1;
  auto comm = chorus::Communicator::Create(*store, "clash", *device, rank, size);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 1;
  }
  int value = rank + 1, sum = 0;
  chorus::Status status =
      comm->AllReduce(&value, &sum, 1, chorus::DataType::kInt32, chorus::ReduceOp::kSum);
  if (!status.ok() || sum != size * (size + 1) / 2) {
    std::fprintf(stderr, "allreduce: %s, sum %d\n", status.ToString().c_str(), sum);
    return 1;
  }
  // An error message, built inside Chorus with its own StrCat.
  chorus::Status bad = comm->Broadcast(&value, &sum, 1, chorus::DataType::kInt32, size);
  if (bad.kind() != chorus::ErrorKind::kInvalidArgument || bad.message().empty()) return 1;
  if (!comm->Barrier().ok()) return 1;
  std::fputs(absl::StrFormat("rank %d: ok (own Abseil beside libchorus; error was \"%s\")\n",
                             rank, bad.message())
                 .c_str(),
             stdout);
  return 0;
}
