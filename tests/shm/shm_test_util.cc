#include "tests/shm/shm_test_util.h"

#include <dirent.h>

#include <cstring>
#include <fstream>
#include <memory>

#include "absl/strings/match.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/file_store.h"
#include "chorus/rendezvous/memory_store.h"
#include "tests/harness/multirank.h"

namespace chorus::shm_testing {

ShmOptions OptionsFor(shm::SingleCopyMode mode) {
  ShmOptions options;
  options.single_copy = mode;
  return options;
}

std::vector<absl::Status> RunMeshThreads(int size, const ShmOptions& options,
                                         const MeshBody& body, absl::Duration timeout) {
  auto device = CreateShmDevice(options);
  if (!device.ok()) return std::vector<absl::Status>(size, device.status());
  MemoryStore store;
  return testing::RunRanksAsThreads(
      size,
      [&](int rank) -> absl::Status {
        auto mesh = (*device)->CreateMesh(store, rank, size, MeshOptions{}, Generous());
        if (!mesh.ok()) return mesh.status();
        return body(**mesh);
      },
      timeout);
}

absl::Status RunMeshInProcess(int rank, int size, const ShmOptions& options,
                              const std::string& store_dir, const MeshBody& body) {
  auto store = FileStore::Open(store_dir);
  if (!store.ok()) return store.status();
  auto device = CreateShmDevice(options);
  if (!device.ok()) return device.status();
  auto mesh = (*device)->CreateMesh(**store, rank, size, MeshOptions{}, Generous());
  if (!mesh.ok()) return mesh.status();
  return body(**mesh);
}

std::string Failures(const std::vector<absl::Status>& statuses) {
  std::string text;
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    if (!statuses[rank].ok()) {
      absl::StrAppend(&text, "rank ", rank, ": ", statuses[rank].ToString(), "\n");
    }
  }
  return text;
}

std::vector<char> Pattern(size_t bytes, uint32_t seed) {
  // Generated a word at a time: the 64 MiB cases stay fast under the sanitizers.
  std::vector<char> data(bytes);
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    std::memcpy(data.data() + i, &state, 8);
  }
  if (i < bytes) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    std::memcpy(data.data() + i, &state, bytes - i);
  }
  return data;
}

absl::Status ExpectPattern(const char* data, size_t bytes, uint32_t seed) {
  const std::vector<char> expected = Pattern(bytes, seed);
  if (bytes == 0 || std::memcmp(data, expected.data(), bytes) == 0) return absl::OkStatus();
  size_t i = 0;
  while (data[i] == expected[i]) ++i;
  return absl::InternalError(absl::StrCat("byte ", i, " of ", bytes, " (seed ", seed,
                                          ") differs"));
}

std::vector<std::string> InboxMappings() {
  std::vector<std::string> found;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (absl::StrContains(line, "chorus-shm")) found.push_back(line);
  }
  return found;
}

std::vector<std::string> ChorusShmFiles() {
  std::vector<std::string> found;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return found;
  while (const struct dirent* entry = readdir(dir)) {
    if (absl::StartsWith(entry->d_name, "chorus")) found.push_back(entry->d_name);
  }
  closedir(dir);
  return found;
}

}  // namespace chorus::shm_testing
