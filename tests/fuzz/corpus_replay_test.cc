// Replays a fuzz target's checked-in corpus in the ordinary build, so every seed (and every
// crash input added to the corpus after a fix) stays a regression test without libFuzzer.
// The BUILD rule links one fuzz target and names its corpus directory as CHORUS_FUZZ_CORPUS,
// relative to the runfiles root; a violated property aborts the test (fuzz_check.h).
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::filesystem::path CorpusDirectory() {
  const char* runfiles = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  REQUIRE(runfiles != nullptr);
  REQUIRE(workspace != nullptr);
  return std::filesystem::path(runfiles) / workspace / CHORUS_FUZZ_CORPUS;
}

std::vector<uint8_t> ReadFile(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  REQUIRE(file.good());
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(file), {});
}

}  // namespace

TEST_CASE("every corpus input passes the fuzz target's property checks") {
  int replayed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(CorpusDirectory())) {
    INFO(entry.path().string());
    const std::vector<uint8_t> input = ReadFile(entry.path());
    CHECK(LLVMFuzzerTestOneInput(input.data(), input.size()) == 0);
    ++replayed;
  }
  // An empty or misplaced corpus would make this test pass while checking nothing.
  CHECK(replayed >= 5);
}
