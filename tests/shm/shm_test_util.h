// Helpers for the shm transport tests: meshes on rank threads or forked ranks, checks that
// return a status (Catch2 assertions are not thread-safe, so rank bodies report through
// absl::Status and the test thread asserts on it), and data patterns.
#ifndef CHORUS_TESTS_SHM_SHM_TEST_UTIL_H_
#define CHORUS_TESTS_SHM_SHM_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "chorus/core/deadline.h"
#include "chorus/transport/shm/shm_device.h"
#include "chorus/transport/transport.h"

namespace chorus::shm_testing {

using shm::AllocateSharedMemory;
using shm::CreateShmDevice;
using shm::FreeSharedMemory;
using shm::ShmOptions;

// Returns an error naming the failed condition (and extra context) from a rank body.
#define SHM_EXPECT(condition, ...)                                                    \
  do {                                                                                \
    if (!(condition)) {                                                               \
      return absl::InternalError(absl::StrCat(__FILE__, ":", __LINE__, ": expected ", \
                                              #condition, " ", ##__VA_ARGS__));       \
    }                                                                                 \
  } while (0)

// Returns the status of an expression when it is not OK, with the line that produced it.
#define SHM_OK(expression)                                                                \
  do {                                                                                    \
    const absl::Status shm_status_ = (expression);                                        \
    if (!shm_status_.ok()) {                                                              \
      return absl::Status(shm_status_.code(), absl::StrCat(__FILE__, ":", __LINE__, ": ", \
                                                           #expression, ": ",             \
                                                           shm_status_.ToString()));      \
    }                                                                                     \
  } while (0)

// Options for a single-copy mode, the rest default.
ShmOptions OptionsFor(shm::SingleCopyMode mode);

using MeshBody = std::function<absl::Status(Mesh& mesh)>;

// Runs `body` on `size` rank threads, each with its own mesh (one device, one MemoryStore).
// Returns each rank's status (mesh creation errors included).
std::vector<absl::Status> RunMeshThreads(int size, const ShmOptions& options,
                                         const MeshBody& body,
                                         absl::Duration timeout = absl::Seconds(60));

// Creates a mesh in a forked rank over a FileStore in `store_dir`.
absl::Status RunMeshInProcess(int rank, int size, const ShmOptions& options,
                              const std::string& store_dir, const MeshBody& body);

// "" when every status is OK, else all the errors, one per line, prefixed by the rank.
std::string Failures(const std::vector<absl::Status>& statuses);

// Deterministic bytes derived from `seed`, and a check of them.
std::vector<char> Pattern(size_t bytes, uint32_t seed);
absl::Status ExpectPattern(const char* data, size_t bytes, uint32_t seed);

// The largest message the tests move: 64 MiB. ThreadSanitizer makes every byte touched many
// times dearer and its runs look for races, not size limits, so there it is 8 MiB (still 16
// staging chunks and one large cross-memory read).
#ifdef __SANITIZE_THREAD__
constexpr size_t kHugeMessage = size_t{8} << 20;
#else
constexpr size_t kHugeMessage = size_t{64} << 20;
#endif

// A generous bound for things that must finish: tests run on a loaded two-core machine.
inline Deadline Generous() { return Deadline::After(absl::Seconds(20)); }

// Memory mappings of this process whose path names a Chorus inbox.
std::vector<std::string> InboxMappings();
// Entries of /dev/shm whose name starts with "chorus".
std::vector<std::string> ChorusShmFiles();

}  // namespace chorus::shm_testing

#endif  // CHORUS_TESTS_SHM_SHM_TEST_UTIL_H_
