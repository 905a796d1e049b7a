// The cache of other processes' device memory mapped into this one, over fake mappings: which
// mappings it opens, shares and closes, and that one in use is never closed.
#include "chorus/cuda/ipc_mappings.h"

#include <catch2/catch.hpp>
#include <map>
#include <thread>
#include <vector>

#include "chorus/core/status.h"

namespace chorus {
namespace {

// Fake mappings: handle n maps to address 0x1000 * (n + 1); records what is open and closed.
class FakeMappings {
 public:
  explicit FakeMappings(size_t capacity)
      : mappings_(capacity, [this](void* base, int device) {
          closed_.push_back(base);
          --open_[base];
        }) {}

  static IpcMappings::Handle HandleOf(int n) {
    IpcMappings::Handle handle{};
    handle[0] = static_cast<uint8_t>(n);
    return handle;
  }
  static void* BaseOf(int n) { return reinterpret_cast<void*>(0x1000 * (n + 1)); }

  absl::StatusOr<void*> Acquire(int n) {
    return mappings_.Acquire(HandleOf(n), /*device=*/0, [&]() -> absl::StatusOr<void*> {
      ++opens_;
      ++open_[BaseOf(n)];
      return BaseOf(n);
    });
  }
  void Release(int n) { mappings_.Release(HandleOf(n)); }
  bool Closed(int n) const {
    for (void* base : closed_) {
      if (base == BaseOf(n)) return true;
    }
    return false;
  }
  // No mapping was opened twice at once or closed more often than opened.
  bool Consistent() const {
    for (const auto& [base, count] : open_) {
      if (count < 0 || count > 1) return false;
    }
    return true;
  }

  int opens_ = 0;
  std::map<void*, int> open_;
  std::vector<void*> closed_;
  IpcMappings mappings_;  // last: its destructor closes into the members above
};

TEST_CASE("a mapping is opened once and shared by every acquire") {
  FakeMappings fake(4);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<void*> base = fake.Acquire(7);
    REQUIRE(base.ok());
    CHECK(*base == FakeMappings::BaseOf(7));
  }
  CHECK(fake.opens_ == 1);
  CHECK(fake.mappings_.open() == 1);
  CHECK(fake.mappings_.in_use() == 1);
  for (int i = 0; i < 3; ++i) fake.Release(7);
  CHECK(fake.mappings_.in_use() == 0);
  CHECK(fake.mappings_.open() == 1);  // kept for the next call
  CHECK(fake.closed_.empty());
}

TEST_CASE("past the capacity the least recently used unused mapping is closed") {
  FakeMappings fake(2);
  for (int n : {1, 2}) {
    REQUIRE(fake.Acquire(n).ok());
    fake.Release(n);
  }
  REQUIRE(fake.Acquire(1).ok());  // 1 is now the more recently used
  fake.Release(1);
  REQUIRE(fake.Acquire(3).ok());
  CHECK(fake.Closed(2));
  CHECK_FALSE(fake.Closed(1));
  CHECK(fake.mappings_.open() == 2);
  CHECK(fake.Consistent());
}

TEST_CASE("a mapping in use is never closed, however full the cache") {
  FakeMappings fake(2);
  // Three calls hold their mappings at once: the cache grows past its capacity.
  for (int n : {1, 2, 3}) REQUIRE(fake.Acquire(n).ok());
  CHECK(fake.mappings_.open() == 3);
  CHECK(fake.closed_.empty());
  // The least recently used one, still in use, survives another open.
  REQUIRE(fake.Acquire(4).ok());
  CHECK_FALSE(fake.Closed(1));
  CHECK(fake.mappings_.open() == 4);
  // Released, the oldest unused ones go until the cache is back at its capacity.
  fake.Release(1);
  fake.Release(2);
  CHECK(fake.Closed(1));
  CHECK(fake.Closed(2));
  CHECK(fake.mappings_.open() == 2);
  fake.Release(3);
  fake.Release(4);
  CHECK(fake.mappings_.open() == 2);
  CHECK(fake.Consistent());
}

TEST_CASE("a failed open returns its error and leaves nothing behind") {
  FakeMappings fake(2);
  absl::StatusOr<void*> failed = fake.mappings_.Acquire(
      FakeMappings::HandleOf(5), 0,
      []() -> absl::StatusOr<void*> { return InternalError("cudaIpcOpenMemHandle failed"); });
  CHECK(failed.status().message() == "cudaIpcOpenMemHandle failed");
  CHECK(fake.mappings_.open() == 0);
  fake.Release(5);  // a release without a successful acquire changes nothing
  CHECK(fake.mappings_.open() == 0);
}

TEST_CASE("the cache closes what is left open when it ends") {
  std::vector<void*> closed;
  {
    IpcMappings mappings(4, [&](void* base, int device) { closed.push_back(base); });
    REQUIRE(mappings.Acquire(FakeMappings::HandleOf(1), 0, [] { return FakeMappings::BaseOf(1); })
                .ok());
    REQUIRE(mappings.Acquire(FakeMappings::HandleOf(2), 0, [] { return FakeMappings::BaseOf(2); })
                .ok());
    mappings.Release(FakeMappings::HandleOf(2));
  }
  CHECK(closed.size() == 2);
}

TEST_CASE("threads acquiring and releasing at once never see a mapping closed in use") {
  constexpr int kThreads = 4;
  constexpr int kRounds = 2000;
  std::mutex mu;
  std::map<void*, int> users;  // what the threads hold, by base
  bool closed_in_use = false;
  IpcMappings mappings(3, [&](void* base, int device) {
    std::lock_guard<std::mutex> lock(mu);
    if (users[base] > 0) closed_in_use = true;
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        const int n = (round * 7 + t * 3) % 8;
        absl::StatusOr<void*> base =
            mappings.Acquire(FakeMappings::HandleOf(n), 0, [n] { return FakeMappings::BaseOf(n); });
        if (!base.ok()) continue;
        {
          std::lock_guard<std::mutex> lock(mu);
          ++users[*base];
        }
        {
          std::lock_guard<std::mutex> lock(mu);
          --users[*base];
        }
        mappings.Release(FakeMappings::HandleOf(n));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK_FALSE(closed_in_use);
  CHECK(mappings.in_use() == 0);
  CHECK(mappings.open() <= 3);
}

}  // namespace
}  // namespace chorus
