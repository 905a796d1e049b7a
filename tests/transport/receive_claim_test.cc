// The pieces a receive shared by two transports is built from: ReceiveClaim (exactly one owner
// wins, a tentative hold makes the others wait for its outcome) and Request::OnCompletion
// (the observer runs exactly once, whichever of completing and observing comes first).
#include "chorus/transport/receive_claim.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "chorus/core/status.h"
#include "chorus/transport/request.h"

namespace chorus {
namespace {

TEST_CASE("a receive claim is won by exactly one owner, also when they race", "[claim]") {
  ReceiveClaim claim;
  CHECK(claim.winner() == ReceiveClaim::kNobody);
  CHECK(claim.TryClaim(1));
  CHECK(claim.TryClaim(1));  // the winner asking again
  CHECK_FALSE(claim.TryClaim(0));
  CHECK_FALSE(claim.Hold(0));
  CHECK(claim.winner() == 1);

  for (int round = 0; round < 200; ++round) {
    ReceiveClaim contested;
    std::atomic<int> winners{0};
    std::vector<std::thread> owners;
    for (int owner = 0; owner < 4; ++owner) {
      owners.emplace_back([&, owner] {
        // Even owners claim at once; odd ones hold, then confirm (shm's announced messages).
        bool won;
        if (owner % 2 == 0) {
          won = contested.TryClaim(owner);
        } else {
          won = contested.Hold(owner);
          if (won) contested.Confirm(owner);
        }
        if (won) winners.fetch_add(1);
      });
    }
    for (std::thread& owner : owners) owner.join();
    INFO("round " << round);
    REQUIRE(winners.load() == 1);
    REQUIRE(contested.winner() >= 0);
  }
}

TEST_CASE("a tentative hold makes other owners wait, and a released one lets them win", "[claim]") {
  ReceiveClaim claim;
  REQUIRE(claim.Hold(0));
  CHECK(claim.winner() == ReceiveClaim::kNobody);  // not won while only held
  std::atomic<bool> decided{false};
  bool won = false;
  std::thread other([&] {
    won = claim.TryClaim(1);
    decided = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(decided.load());  // waits for the hold to be settled, does not decide past it
  claim.Release();              // the held message turned out withdrawn by its sender
  other.join();
  CHECK(won);
  CHECK(claim.winner() == 1);

  ReceiveClaim confirmed;
  REQUIRE(confirmed.Hold(0));
  std::thread loser([&] { won = confirmed.TryClaim(1); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  confirmed.Confirm(0);
  loser.join();
  CHECK_FALSE(won);
  CHECK(confirmed.winner() == 0);
}

class TestRequest final : public Request {
 public:
  TestRequest() : Request(RequestKind::kRecv, 1, 7) {}
  void Cancel() override { Complete(AbortedError("cancelled"), 0); }
};

TEST_CASE("a completion observer runs exactly once, set before or after completion", "[claim]") {
  {
    TestRequest request;
    int runs = 0;
    request.OnCompletion([&] { ++runs; });
    CHECK(runs == 0);
    request.Complete(absl::OkStatus(), 5);
    request.Complete(absl::OkStatus(), 6);  // a second completion is ignored
    CHECK(runs == 1);
  }
  {
    TestRequest request;
    request.Complete(absl::OkStatus(), 5);
    int runs = 0;
    request.OnCompletion([&] { ++runs; });
    CHECK(runs == 1);
  }
  for (int round = 0; round < 500; ++round) {
    TestRequest request;
    std::atomic<int> runs{0};
    std::thread completer([&] { request.Complete(absl::OkStatus(), 1); });
    request.OnCompletion([&] { runs.fetch_add(1); });
    completer.join();
    INFO("round " << round);
    REQUIRE(runs.load() == 1);
  }
}

}  // namespace
}  // namespace chorus
