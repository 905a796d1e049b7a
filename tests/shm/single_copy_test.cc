// Cross-memory reads handed to a sink (CrossMemoryReadToSink): the pieces and their order, a
// read that fails part way (the sink keeps the leading pieces; the error says what failed) and
// a process that is gone (kPeerUnavailable).
#include "chorus/transport/shm/single_copy.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "chorus/core/status.h"
#include "tests/transport/recording_sink.h"

namespace chorus::testing {
namespace {

using shm::CrossMemoryReadToSink;
using shm::kCrossMemoryPieceBytes;

uint8_t PatternByte(size_t i) { return static_cast<uint8_t>(i * 131 + 7); }

TEST_CASE("a cross-memory read reaches the sink in whole pieces, in order") {
  const size_t bytes = 2 * kCrossMemoryPieceBytes + 8;
  std::vector<uint8_t> source(bytes);
  for (size_t i = 0; i < bytes; ++i) source[i] = PatternByte(i);
  RecordingSink sink(bytes);
  const absl::Status status =
      CrossMemoryReadToSink(getpid(), sink, reinterpret_cast<uint64_t>(source.data()), bytes);
  INFO(status.ToString());
  REQUIRE(status.ok());
  CHECK(sink.pieces() == 3);
  CHECK(sink.Check(bytes).ok());
  CHECK(sink.data() == source);
}

TEST_CASE("a cross-memory read that fails part way keeps the pieces already handed over") {
  // Two pieces' worth of address space whose second half is unmapped: the first piece reads,
  // the second fails with EFAULT.
  const size_t bytes = 2 * kCrossMemoryPieceBytes;
  void* region = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(region != MAP_FAILED);
  auto* source = static_cast<uint8_t*>(region);
  for (size_t i = 0; i < kCrossMemoryPieceBytes; ++i) source[i] = PatternByte(i);
  REQUIRE(munmap(source + kCrossMemoryPieceBytes, kCrossMemoryPieceBytes) == 0);

  RecordingSink sink(bytes);
  const absl::Status status =
      CrossMemoryReadToSink(getpid(), sink, reinterpret_cast<uint64_t>(source), bytes);
  INFO(status.ToString());
  CHECK(GetErrorKind(status) == ErrorKind::kInternal);
  CHECK(absl::StrContains(status.message(), "process_vm_readv"));
  CHECK(sink.pieces() == 1);
  CHECK(sink.Check(kCrossMemoryPieceBytes).ok());  // the first piece, once; nothing after
  CHECK(std::memcmp(sink.data().data(), source, kCrossMemoryPieceBytes) == 0);
  munmap(source, kCrossMemoryPieceBytes);
}

TEST_CASE("a cross-memory read from a process that is gone is kPeerUnavailable") {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  int wait_status = 0;
  REQUIRE(waitpid(child, &wait_status, 0) == child);

  uint64_t word = 0;
  RecordingSink sink(sizeof(word));
  const absl::Status status =
      CrossMemoryReadToSink(child, sink, reinterpret_cast<uint64_t>(&word), sizeof(word));
  INFO(status.ToString());
  CHECK(GetErrorKind(status) == ErrorKind::kPeerUnavailable);
  CHECK(absl::StrContains(status.message(), "gone"));
  CHECK(sink.pieces() == 0);
}

}  // namespace
}  // namespace chorus::testing
