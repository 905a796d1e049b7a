// Runs a multi-rank transport scenario against every conformance transport, with the ranks as
// threads of this process (MemoryStore) and as forked processes (FileStore). Rank bodies
// report failures as statuses (Catch2 assertions are not thread- or fork-safe); the runner
// turns them into test failures.
#ifndef CHORUS_TESTS_TRANSPORT_SCENARIO_H_
#define CHORUS_TESTS_TRANSPORT_SCENARIO_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/store.h"
#include "chorus/transport/transport.h"
#include "tests/transport/transport_factory.h"

namespace chorus::testing {

// Sanitizer builds run several times slower (TSan far more); tests scale their largest
// messages by this so the suite still finishes in time there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr size_t kLargeMessageBytes = 16 << 20;
#else
inline constexpr size_t kLargeMessageBytes = 64 << 20;
#endif

// What a rank body gets.
struct RankEnv {
  int rank = 0;
  int size = 0;
  bool separate_process = false;
  Store* store = nullptr;                 // shared by the ranks, for coordination
  std::unique_ptr<Mesh>* mesh = nullptr;  // the body may destroy it (peer death)
  Device* device = nullptr;

  Mesh& m() const { return **mesh; }
  // The connection to `peer`, or an error status.
  absl::StatusOr<Connection*> To(int peer) const { return m().GetConnection(peer); }
};

using ScenarioBody = std::function<absl::Status(RankEnv&)>;

enum class RankMode { kThreads, kProcesses };

// One run: `size` ranks of `body` over `transport` in `mode`; the status of each rank.
std::vector<absl::Status> RunScenarioOnce(const TransportFactory& transport, RankMode mode,
                                          int size, const ScenarioBody& body);

// Every rank waits until all have reached `name` (keys "<name>/<rank>" in the store).
absl::Status Barrier(const RankEnv& env, const std::string& name);

// Deterministic contents: byte i of message `seed` is a function of both; never all zero.
std::vector<uint8_t> Pattern(uint64_t seed, size_t size);
// Empty when `data` is Pattern(seed, size); else where it first differs.
std::string CheckPattern(const uint8_t* data, size_t size, uint64_t seed);

#define SCENARIO_EXPECT(condition, ...)                                                           \
  do {                                                                                            \
    if (!(condition)) {                                                                           \
      return ::chorus::InternalError(::absl::StrCat("expected ", #condition, " (", __FILE__, ":", \
                                                    __LINE__, ") ", __VA_ARGS__));                \
    }                                                                                             \
  } while (0)

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_TRANSPORT_SCENARIO_H_
