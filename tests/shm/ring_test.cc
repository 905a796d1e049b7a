// The record ring on its own (wrap-around, padding, backpressure, corrupt sizes) and the
// CHORUS_SHM_* options.
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <cstring>
#include <vector>

#include "chorus/core/status.h"
#include "chorus/transport/shm/layout.h"
#include "chorus/transport/shm/ring.h"
#include "chorus/transport/shm/shm_device.h"
#include "tests/shm/test_area.h"

namespace chorus::shm {
namespace {

TEST_CASE("records of every size round-trip through many wrap-arounds in order") {
  TestArea area(4096);
  RingWriter writer(area.view);
  RingReader reader(area.view);
  REQUIRE(writer.max_payload() == 1024);
  uint64_t written = 0;
  uint64_t read = 0;
  bool corrupt = false;
  // Sizes chosen so records straddle the end of the ring at varying offsets.
  for (int round = 0; round < 2000; ++round) {
    const uint64_t size = (round * 37) % (writer.max_payload() + 1);
    std::vector<char> payload(size, static_cast<char>(round));
    Record record{};
    record.type = RecordType::kEager;
    record.tag = round;
    record.length = size;
    while (!writer.TryWrite(record, payload.data(), size)) {
      // Full: the consumer drains one record, then the producer retries.
      const Record* next = reader.Next(&corrupt);
      REQUIRE(next != nullptr);
      REQUIRE(next->tag == read);
      reader.Consume(*next);
      ++read;
    }
    ++written;
  }
  while (const Record* next = reader.Next(&corrupt)) {
    REQUIRE(next->tag == read);
    REQUIRE(next->length == (read * 37) % (writer.max_payload() + 1));
    const char* payload = reinterpret_cast<const char*>(next + 1);
    for (uint64_t i = 0; i < next->length; ++i) REQUIRE(payload[i] == static_cast<char>(read));
    reader.Consume(*next);
    ++read;
  }
  CHECK_FALSE(corrupt);
  CHECK(read == written);
  // Everything consumed: the ring has room for a maximal record again.
  Record record{};
  record.type = RecordType::kEager;
  record.length = writer.max_payload();
  std::vector<char> payload(writer.max_payload());
  CHECK(writer.TryWrite(record, payload.data(), payload.size()));
}

TEST_CASE("a full ring refuses a record and accepts it once space is freed") {
  TestArea area(4096);
  RingWriter writer(area.view);
  RingReader reader(area.view);
  Record record{};
  record.type = RecordType::kFinished;
  int accepted = 0;
  while (writer.TryWrite(record)) ++accepted;
  CHECK(accepted == 4096 / 32);
  bool corrupt = false;
  const Record* next = reader.Next(&corrupt);
  REQUIRE(next != nullptr);
  reader.Consume(*next);
  CHECK(writer.TryWrite(record));
  CHECK_FALSE(writer.TryWrite(record));
}

TEST_CASE("a record with an impossible size is reported as corrupt, not read") {
  TestArea area(4096);
  RingWriter writer(area.view);
  RingReader reader(area.view);
  Record record{};
  record.type = RecordType::kEager;
  record.length = 16;
  std::vector<char> payload(16);
  REQUIRE(writer.TryWrite(record, payload.data(), payload.size()));
  // Overwrite the published length with one larger than the ring allows.
  reinterpret_cast<Record*>(area.view.ring)->length = 1 << 20;
  bool corrupt = false;
  CHECK(reader.Next(&corrupt) == nullptr);
  CHECK(corrupt);
}

TEST_CASE("CHORUS_SHM_* variables set the options; bad values name the variable") {
  setenv("CHORUS_SHM_RING_BYTES", "1M", 1);
  setenv("CHORUS_SHM_SINGLE_COPY", "staging", 1);
  setenv("CHORUS_SHM_SPIN_US", "7", 1);
  auto options = ShmOptions::FromEnv();
  REQUIRE(options.ok());
  CHECK(options->ring_bytes == (uint64_t{1} << 20));
  CHECK(options->single_copy == SingleCopyMode::kStaging);
  CHECK(options->spin == absl::Microseconds(7));

  setenv("CHORUS_SHM_RING_BYTES", "5000", 1);  // not a power of two
  options = ShmOptions::FromEnv();
  CHECK(GetErrorKind(options.status()) == ErrorKind::kInvalidArgument);
  CHECK(options.status().message().find("CHORUS_SHM_RING_BYTES") != std::string::npos);
  unsetenv("CHORUS_SHM_RING_BYTES");

  setenv("CHORUS_SHM_SINGLE_COPY", "sometimes", 1);
  options = ShmOptions::FromEnv();
  CHECK(GetErrorKind(options.status()) == ErrorKind::kInvalidArgument);
  CHECK(options.status().message().find("CHORUS_SHM_SINGLE_COPY") != std::string::npos);
  unsetenv("CHORUS_SHM_SINGLE_COPY");

  setenv("CHORUS_SHM_STAGING_BYTES", "1000", 1);
  CHECK(GetErrorKind(CreateShmDevice().status()) == ErrorKind::kInvalidArgument);
  unsetenv("CHORUS_SHM_STAGING_BYTES");
  unsetenv("CHORUS_SHM_SPIN_US");
  CHECK(CreateShmDevice().ok());
}

}  // namespace
}  // namespace chorus::shm
