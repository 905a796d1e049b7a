// Sub-communicators: Split and CreateGroup over views of the parent's mesh run the correctness
// cases on groups of every size from 1 to 9 ranks (non-contiguous, reversed, singleton) in
// parallel with their parent and with each other; a rank that dies during Split fails it
// promptly on the others, naming it.
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chorus/core/status.h"
#include "tests/collectives/cases.h"
#include "tests/collectives/test_transport.h"

namespace chorus::testing {
namespace {

constexpr int kWorld = 9;

// The cases every group runs: every collective and algorithm, two types, two ops.
Matrix GroupMatrix() {
  Matrix matrix;
  matrix.types = {DataType::kInt32, DataType::kBFloat16};
  matrix.ops = {ReduceOp::kSum, ReduceOp::kMax};
  matrix.counts = {0, 7, 1000};
  return matrix;
}

// Runs the cases on every communicator of `comms` at once, one thread each.
absl::Status RunInParallel(const std::vector<Communicator*>& comms) {
  std::vector<absl::Status> statuses(comms.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < comms.size(); ++i) {
    threads.emplace_back([&, i] {
      statuses[i] = RunCases(*comms[i], BuildCases(GroupMatrix(), comms[i]->size()));
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (size_t i = 0; i < comms.size(); ++i) {
    CHORUS_RETURN_IF_ERROR(Annotate(statuses[i], comms[i]->name()));
  }
  return absl::OkStatus();
}

// Checks that `comm` numbers the parent's `members` as its ranks 0, 1, ...
absl::Status ExpectMembers(Communicator& comm, int parent_rank, const std::vector<int>& members) {
  CHORUS_RETURN_IF_ERROR(Expect(comm.size() == static_cast<int>(members.size()),
                                absl::StrCat(comm.name(), " has ", comm.size(), " ranks")));
  CHORUS_RETURN_IF_ERROR(Expect(members[comm.rank()] == parent_rank,
                                absl::StrCat(comm.name(), ": rank ", comm.rank(), " is not ",
                                             parent_rank)));
  const int32_t mine = parent_rank;
  std::vector<int32_t> all(comm.size(), -1);
  CHORUS_RETURN_IF_ERROR(comm.AllGather(&mine, all.data(), 1, DataType::kInt32));
  return Expect(std::equal(all.begin(), all.end(), members.begin()),
                absl::StrCat(comm.name(), " gathered [", absl::StrJoin(all, ","), "]"));
}

TEST_CASE("split groups and explicit groups run every collective beside their parent",
          "[split]") {
  const absl::Status status = RunOnThreads(
      kTestTransport, kWorld,
      [](Communicator& world) -> absl::Status {
        const int r = world.rank();
        // Evens and odds, each in reverse order: 5 and 4 ranks, neither contiguous.
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> parity, world.Split(r % 2, -r));
        const std::vector<int> evens = {8, 6, 4, 2, 0};
        const std::vector<int> odds = {7, 5, 3, 1};
        CHORUS_RETURN_IF_ERROR(ExpectMembers(*parity, r, r % 2 == 0 ? evens : odds));
        // Everyone but rank 4, which passes no color: 8 ranks.
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> most,
                                world.Split(r == 4 ? Communicator::kNoColor : 0, r));
        if (r == 4) {
          CHORUS_RETURN_IF_ERROR(Expect(most == nullptr, "rank 4 got a communicator"));
        } else {
          CHORUS_RETURN_IF_ERROR(ExpectMembers(*most, r, {0, 1, 2, 3, 5, 6, 7, 8}));
        }
        // The first three and the other six.
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> thirds, world.Split(r < 3, r));
        CHORUS_RETURN_IF_ERROR(ExpectMembers(
            *thirds, r, r < 3 ? std::vector<int>{0, 1, 2} : std::vector<int>{3, 4, 5, 6, 7, 8}));
        // Explicit groups, made by their members only: a singleton, a reversed pair and seven
        // ranks out of order.
        std::unique_ptr<Communicator> group;
        if (r == 4) {
          CHORUS_ASSIGN_OR_RETURN(group, world.CreateGroup({4}));
          CHORUS_RETURN_IF_ERROR(ExpectMembers(*group, r, {4}));
        } else if (r == 2 || r == 7) {
          CHORUS_ASSIGN_OR_RETURN(group, world.CreateGroup({7, 2}));
          CHORUS_RETURN_IF_ERROR(ExpectMembers(*group, r, {7, 2}));
        }
        const std::vector<int> seven = {8, 0, 6, 1, 5, 3, 7};
        std::unique_ptr<Communicator> septet;
        if (std::find(seven.begin(), seven.end(), r) != seven.end()) {
          CHORUS_ASSIGN_OR_RETURN(septet, world.CreateGroup(seven));
          CHORUS_RETURN_IF_ERROR(ExpectMembers(*septet, r, seven));
        }
        std::vector<Communicator*> comms = {&world, parity.get(), thirds.get()};
        for (Communicator* comm : {most.get(), group.get(), septet.get()}) {
          if (comm != nullptr) comms.push_back(comm);
        }
        return RunInParallel(comms);
      },
      absl::Minutes(8));
  INFO(TransportName(kTestTransport));
  CHECK(status.ok());
  if (!status.ok()) FAIL(status.ToString());
}

TEST_CASE("a split of a split, and a group made twice, are communicators of their own",
          "[split]") {
  const absl::Status status = RunOnThreads(
      kTestTransport, 4,
      [](Communicator& world) -> absl::Status {
        const int r = world.rank();
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> half, world.Split(r / 2, r));
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> alone,
                                half->Split(half->rank(), 0));
        CHORUS_RETURN_IF_ERROR(ExpectMembers(*alone, half->rank(), {half->rank()}));
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> first,
                                world.CreateGroup({0, 1, 2, 3}));
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> second,
                                world.CreateGroup({0, 1, 2, 3}));
        CHORUS_RETURN_IF_ERROR(Expect(first->name() != second->name(), "one name twice"));
        // A parent can go first: its children keep its connections.
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> grandchild, first->Split(0, -r));
        first.reset();
        for (Communicator* comm : {grandchild.get(), second.get()}) {
          int64_t value = r;
          CHORUS_RETURN_IF_ERROR(
              comm->AllReduce(&value, &value, 1, DataType::kInt64, ReduceOp::kSum));
          CHORUS_RETURN_IF_ERROR(Expect(value == 6, absl::StrCat(comm->name(), ": sum ", value)));
        }
        return ExpectMembers(*grandchild, r, {3, 2, 1, 0});
      },
      absl::Minutes(2));
  CHECK(status.ok());
  if (!status.ok()) FAIL(status.ToString());
}

TEST_CASE("bad groups are refused; aborting a child leaves its parent running", "[split]") {
  const absl::Status status = RunOnThreads(
      kTestTransport, 3,
      [](Communicator& world) -> absl::Status {
        for (const std::vector<int>& bad :
             {std::vector<int>{}, std::vector<int>{0, 0}, std::vector<int>{0, 3},
              std::vector<int>{(world.rank() + 1) % 3}}) {
          const absl::Status refused = world.CreateGroup(bad).status();
          CHORUS_RETURN_IF_ERROR(
              Expect(GetErrorKind(refused) == ErrorKind::kInvalidArgument, refused.ToString()));
        }
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> child, world.Split(0, 0));
        if (world.rank() == 0) child->Abort("testing");
        int32_t value = 1;
        const absl::Status aborted =
            child->AllReduce(&value, &value, 1, DataType::kInt32, ReduceOp::kSum);
        CHORUS_RETURN_IF_ERROR(Expect(!aborted.ok(), "the aborted child's allreduce succeeded"));
        value = 1;
        CHORUS_RETURN_IF_ERROR(world.AllReduce(&value, &value, 1, DataType::kInt32,
                                               ReduceOp::kSum));
        return Expect(value == 3, absl::StrCat("the parent's sum is ", value));
      },
      absl::Minutes(2));
  CHECK(status.ok());
  if (!status.ok()) FAIL(status.ToString());
}

#ifdef CHORUS_TEST_PROCESSES
TEST_CASE("a rank that dies instead of splitting fails the split on the others, naming it",
          "[split]") {
  const absl::Status status = RunOnProcesses(
      kTestTransport, 4,
      [](Communicator& world) -> absl::Status {
        int32_t value = 1;
        CHORUS_RETURN_IF_ERROR(world.AllReduce(&value, &value, 1, DataType::kInt32,
                                               ReduceOp::kSum));
        if (world.rank() == 3) syscall(SYS_exit_group, 0);
        const auto start = std::chrono::steady_clock::now();
        const absl::Status failed = world.Split(0, world.rank()).status();
        const auto took = std::chrono::steady_clock::now() - start;
        CHORUS_RETURN_IF_ERROR(
            Expect(GetErrorKind(failed) == ErrorKind::kPeerUnavailable, failed.ToString()));
        CHORUS_RETURN_IF_ERROR(Expect(absl::StrContains(failed.message(), "Split"),
                                      failed.ToString()));
        CHORUS_RETURN_IF_ERROR(Expect(absl::StrContains(failed.message(), "rank 3"),
                                      failed.ToString()));
        return Expect(took < std::chrono::seconds(1), "the split failed late");
      },
      absl::Minutes(1));
  CHECK(status.ok());
  if (!status.ok()) FAIL(status.ToString());
}
#endif

}  // namespace
}  // namespace chorus::testing
