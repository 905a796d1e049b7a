// The C API's contract, on the static libchorus.a that //:chorus builds (the same object as the
// shared library): errors and the per-thread last error, option structs of older (shorter)
// layouts, the flight-recorder dump's truncation, collectives, asynchronous work and
// point-to-point calls, and communicators made by split, group and shrink, among ranks that are
// threads of this process over one file store.
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus_c.h"

namespace {

// A fresh directory under TEST_TMPDIR, removed (with the store's files) at the end.
class ScratchDir {
 public:
  ScratchDir() {
    const char* base = getenv("TEST_TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/c_api_test.XXXXXX";
    path_ = mkdtemp(pattern.data()) ? pattern : "";
    REQUIRE(!path_.empty());
  }
  ~ScratchDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  std::string url() const { return "file://" + path_; }

 private:
  std::string path_;
};

// Runs body(comm, rank) on `size` threads, one communicator each, and returns each rank's
// first failure ("" if none). A body may destroy `comm` itself and set it to NULL.
std::vector<std::string> RunRanks(int size,
                                  const std::function<std::string(chorus_comm_t*&, int)>& body) {
  ScratchDir dir;
  std::vector<std::string> failures(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      chorus_store_t* store = nullptr;
      chorus_device_t* device = nullptr;
      chorus_comm_t* comm = nullptr;
      chorus_comm_options_t options = CHORUS_COMM_OPTIONS_INIT;
      options.timeout_seconds = 30;
      if (chorus_store_open(dir.url().c_str(), &store) != CHORUS_OK ||
          chorus_device_create("tcp", &device) != CHORUS_OK ||
          chorus_comm_create(store, "test", device, rank, size, &options, &comm) != CHORUS_OK) {
        failures[rank] = std::string("setup: ") + chorus_last_error();
      } else {
        failures[rank] = body(comm, rank);
      }
      chorus_comm_destroy(comm);
      chorus_device_destroy(device);
      chorus_store_destroy(store);
    });
  }
  for (std::thread& thread : threads) thread.join();
  return failures;
}

// A communicator made by split, group or shrink, destroyed at the end of its scope.
using OwnedComm = std::unique_ptr<chorus_comm_t, void (*)(chorus_comm_t*)>;
OwnedComm Owned(chorus_comm_t* comm) { return OwnedComm(comm, chorus_comm_destroy); }

// Each rank of `comm` contributes its rank in `parent`: the members of `comm` in its rank order.
chorus_error_t Members(chorus_comm_t* comm, int parent, std::vector<int32_t>* members) {
  members->assign(static_cast<size_t>(chorus_comm_size(comm)), -1);
  return chorus_allgather(comm, &parent, members->data(), 1, CHORUS_INT32, nullptr);
}

#define RANK_CHECK(call)                                                                    \
  do {                                                                                      \
    if (chorus_error_t e = (call); e != CHORUS_OK) {                                        \
      return std::string(#call) + ": " + chorus_error_name(e) + ": " + chorus_last_error(); \
    }                                                                                       \
  } while (0)
#define RANK_EXPECT(condition)                                      \
  do {                                                              \
    if (!(condition)) return std::string("expected ") + #condition; \
  } while (0)

TEST_CASE("errors are codes with a per-thread message", "[c_api]") {
  chorus_store_t* store = reinterpret_cast<chorus_store_t*>(1);
  CHECK(chorus_store_open("gopher://nowhere", &store) == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(store == nullptr);
  const std::string message = chorus_last_error();
  CHECK(message.find("gopher") != std::string::npos);
  CHECK(chorus_last_error_peer() == -1);
  // Another thread has its own (empty) last error; a later success leaves this one alone.
  std::string other = "unset";
  std::thread([&] { other = chorus_last_error(); }).join();
  CHECK(other.empty());
  CHECK(chorus_version() == CHORUS_VERSION_CODE);
  CHECK(message == chorus_last_error());

  CHECK(chorus_store_open("file:///tmp", nullptr) == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(chorus_device_create("carrier-pigeon", nullptr) == CHORUS_ERR_INVALID_ARGUMENT);
  chorus_device_t* device = nullptr;
  CHECK(chorus_device_create("carrier-pigeon", &device) == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(device == nullptr);
  CHECK(chorus_allreduce(nullptr, nullptr, nullptr, 0, CHORUS_INT8, CHORUS_SUM, nullptr) ==
        CHORUS_ERR_INVALID_ARGUMENT);
  chorus_work_t* work = reinterpret_cast<chorus_work_t*>(1);
  CHECK(chorus_barrier_async(nullptr, nullptr, &work) == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(work == nullptr);
  CHECK(std::string(chorus_error_name(CHORUS_ERR_MISMATCH)) == "mismatch");
  CHECK(std::string(chorus_error_name(static_cast<chorus_error_t>(99))) == "unknown");
  CHECK(chorus_datatype_size(CHORUS_BFLOAT16) == 2);
  CHECK(chorus_datatype_size(static_cast<chorus_datatype_t>(42)) == 0);

  // Communicators made from none, or into nowhere.
  chorus_comm_t* made = reinterpret_cast<chorus_comm_t*>(1);
  CHECK(chorus_comm_split(nullptr, 0, 0, &made) == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(made == nullptr);
  const int ranks[] = {0};
  made = reinterpret_cast<chorus_comm_t*>(1);
  CHECK(chorus_comm_create_group(nullptr, ranks, 1, &made) == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(made == nullptr);
  made = reinterpret_cast<chorus_comm_t*>(1);
  CHECK(chorus_comm_shrink(nullptr, nullptr, 0, &made) == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(made == nullptr);
  CHECK(std::string(chorus_last_error()) == "comm is null");
  CHECK(chorus_comm_split(nullptr, 0, 0, nullptr) == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(std::string(chorus_last_error()) == "new_comm is null");
}

TEST_CASE("collectives, work and point-to-point among 3 ranks", "[c_api]") {
  const std::vector<std::string> failures = RunRanks(3, [](chorus_comm_t* comm, int rank) {
    const int size = chorus_comm_size(comm);
    // Bad enum values and a bad algorithm are invalid arguments, found before anything is sent.
    int32_t x = rank, y = 0;
    RANK_EXPECT(chorus_allreduce(comm, &x, &y, 1, static_cast<chorus_datatype_t>(CHORUS_UINT16 + 1),
                                 CHORUS_SUM,
                                 nullptr) == CHORUS_ERR_INVALID_ARGUMENT);
    RANK_EXPECT(chorus_allreduce(comm, &x, &y, 1, CHORUS_INT32, static_cast<chorus_reduce_op_t>(-1),
                                 nullptr) == CHORUS_ERR_INVALID_ARGUMENT);
    chorus_call_options_t options = CHORUS_CALL_OPTIONS_INIT;
    options.algorithm = "no-such-algorithm";
    RANK_EXPECT(chorus_allreduce(comm, &x, &y, 1, CHORUS_INT32, CHORUS_SUM, &options) ==
                CHORUS_ERR_INVALID_ARGUMENT);
    // A caller built against an older, shorter struct: the library does not read past it.
    options.struct_size = offsetof(chorus_call_options_t, algorithm);
    RANK_CHECK(chorus_allreduce(comm, &x, &y, 1, CHORUS_INT32, CHORUS_SUM, &options));
    RANK_EXPECT(y == 0 + 1 + 2);

    // reduce_scatterv: rank r gets r + 1 elements, each the sum over ranks of (rank + 1).
    std::vector<size_t> counts = {1, 2, 3};
    std::vector<float> send(6, static_cast<float>(rank + 1)), recv(rank + 1, 0);
    RANK_CHECK(chorus_reduce_scatterv(comm, send.data(), recv.data(), counts.data(), CHORUS_FLOAT32,
                                      CHORUS_SUM, nullptr));
    for (float value : recv) RANK_EXPECT(value == 6.0f);

    // gatherv with counts and displacements on the root only.
    std::vector<int64_t> mine(rank + 1, rank), all(6, -1);
    std::vector<size_t> displs = {0, 1, 3};
    RANK_CHECK(chorus_gatherv(comm, mine.data(), mine.size(), all.data(),
                              rank == 0 ? counts.data() : nullptr,
                              rank == 0 ? displs.data() : nullptr, CHORUS_INT64, 0, nullptr));
    if (rank == 0) RANK_EXPECT((all == std::vector<int64_t>{0, 1, 1, 2, 2, 2}));

    // Asynchronous alltoall, then broadcast from rank 2.
    std::vector<uint8_t> out = {uint8_t(rank * 10), uint8_t(rank * 10 + 1), uint8_t(rank * 10 + 2)};
    std::vector<uint8_t> in(3);
    chorus_work_t* work = nullptr;
    RANK_CHECK(chorus_alltoall_async(comm, out.data(), in.data(), 1, CHORUS_UINT8, nullptr, &work));
    RANK_CHECK(chorus_work_wait(work, 30));
    RANK_EXPECT(chorus_work_test(work) == 1 && chorus_work_peer(work) == -1);
    chorus_work_destroy(work);
    for (int r = 0; r < size; ++r) RANK_EXPECT(in[r] == r * 10 + rank);
    double value = rank == 2 ? 2.5 : 0;
    RANK_CHECK(chorus_broadcast(comm, &value, &value, 1, CHORUS_FLOAT64, 2, nullptr));
    RANK_EXPECT(value == 2.5);

    // Rank 0 receives from whichever of 1 and 2 sends first, then the other.
    if (rank == 0) {
      int32_t got = -1;
      int from = -1;
      const int peers[] = {1, 2};
      RANK_CHECK(chorus_recv_from_any(comm, &got, 1, CHORUS_INT32, peers, 2, 9, &from, nullptr));
      RANK_EXPECT((from == 1 || from == 2) && got == from * 7);
      RANK_CHECK(
          chorus_recv_from_any_async(comm, &got, 1, CHORUS_INT32, peers, 2, 9, nullptr, &work));
      RANK_CHECK(chorus_work_wait(work, 30));
      RANK_EXPECT(chorus_work_peer(work) == 3 - from && got == (3 - from) * 7);
      chorus_work_destroy(work);
    } else {
      const int32_t token = rank * 7;
      RANK_CHECK(chorus_send(comm, &token, 1, CHORUS_INT32, 0, 9, nullptr));
    }

    // A receive nobody answers: a short wait runs out, destroying the work aborts it.
    int32_t never = 0;
    RANK_CHECK(
        chorus_recv_async(comm, &never, 1, CHORUS_INT32, (rank + 1) % size, 77, nullptr, &work));
    RANK_EXPECT(chorus_work_wait(work, 0.05) == CHORUS_ERR_DEADLINE_EXCEEDED);
    chorus_work_destroy(work);

    RANK_CHECK(chorus_barrier(comm, nullptr));
    // The dump is cut to the buffer, NUL-terminated, and its full length returned.
    const size_t length = chorus_comm_flight_recorder_dump(comm, nullptr, 0);
    RANK_EXPECT(length > 8);
    char small[8];
    RANK_EXPECT(chorus_comm_flight_recorder_dump(comm, small, sizeof small) >= length);
    RANK_EXPECT(std::strlen(small) == sizeof small - 1);
    return std::string();
  });
  for (int rank = 0; rank < 3; ++rank) {
    INFO("rank " << rank);
    CHECK(failures[rank].empty());
    if (!failures[rank].empty()) FAIL_CHECK(failures[rank]);
  }
}

TEST_CASE("split and groups among 4 ranks, a child outliving its parent", "[c_api]") {
  const std::vector<std::string> failures = RunRanks(4, [](chorus_comm_t*& comm, int rank) {
    // Bad arguments are found before anything is sent; the out-parameter is left NULL.
    chorus_comm_t* made = reinterpret_cast<chorus_comm_t*>(1);
    RANK_EXPECT(chorus_comm_split(comm, 0, 0, nullptr) == CHORUS_ERR_INVALID_ARGUMENT);
    const int outside[] = {rank, 4}, twice[] = {rank, rank}, others[] = {(rank + 1) % 4};
    RANK_EXPECT(chorus_comm_create_group(comm, outside, 2, &made) == CHORUS_ERR_INVALID_ARGUMENT);
    RANK_EXPECT(made == nullptr);
    RANK_EXPECT(std::string(chorus_last_error()).find("distinct ranks") != std::string::npos);
    RANK_EXPECT(chorus_comm_create_group(comm, twice, 2, &made) == CHORUS_ERR_INVALID_ARGUMENT);
    RANK_EXPECT(chorus_comm_create_group(comm, others, 1, &made) == CHORUS_ERR_INVALID_ARGUMENT);
    RANK_EXPECT(chorus_comm_create_group(comm, nullptr, 1, &made) == CHORUS_ERR_INVALID_ARGUMENT);
    RANK_EXPECT(chorus_comm_create_group(comm, nullptr, 0, &made) == CHORUS_ERR_INVALID_ARGUMENT);
    RANK_EXPECT(chorus_comm_create_group(comm, outside, 1, nullptr) ==
                CHORUS_ERR_INVALID_ARGUMENT);

    // Two colors, each ranked by descending parent rank: {2, 0} and {3, 1}.
    const int color = rank % 2;
    RANK_CHECK(chorus_comm_split(comm, color, -rank, &made));
    OwnedComm half = Owned(made);
    RANK_EXPECT(chorus_comm_size(half.get()) == 2);
    RANK_EXPECT(chorus_comm_rank(half.get()) == (rank < 2 ? 1 : 0));
    std::vector<int32_t> members;
    RANK_CHECK(Members(half.get(), rank, &members));
    RANK_EXPECT((members == std::vector<int32_t>{color + 2, color}));
    int32_t sum = -1;
    RANK_CHECK(chorus_allreduce(half.get(), &rank, &sum, 1, CHORUS_INT32, CHORUS_SUM, nullptr));
    RANK_EXPECT(sum == 2 * color + 2);

    // Rank 3 has no color: NULL and OK. The others keep their order.
    made = reinterpret_cast<chorus_comm_t*>(1);
    RANK_CHECK(chorus_comm_split(comm, rank == 3 ? CHORUS_NO_COLOR : 5, 0, &made));
    OwnedComm three = Owned(made);
    if (rank == 3) {
      RANK_EXPECT(three == nullptr);
    } else {
      RANK_EXPECT(three != nullptr && chorus_comm_size(three.get()) == 3);
      RANK_CHECK(Members(three.get(), rank, &members));
      RANK_EXPECT((members == std::vector<int32_t>{0, 1, 2}));
      RANK_CHECK(chorus_allreduce(three.get(), &rank, &sum, 1, CHORUS_INT32, CHORUS_SUM, nullptr));
      RANK_EXPECT(sum == 0 + 1 + 2);
    }

    // A group of ranks 3 and 1, in that order, made by them alone while ranks 0 and 2 go on.
    if (rank % 2 == 1) {
      const int group_ranks[] = {3, 1};
      RANK_CHECK(chorus_comm_create_group(comm, group_ranks, 2, &made));
      OwnedComm group = Owned(made);
      RANK_EXPECT(chorus_comm_size(group.get()) == 2);
      RANK_EXPECT(chorus_comm_rank(group.get()) == (rank == 3 ? 0 : 1));
      RANK_CHECK(Members(group.get(), rank, &members));
      RANK_EXPECT((members == std::vector<int32_t>{3, 1}));
      RANK_CHECK(chorus_allreduce(group.get(), &rank, &sum, 1, CHORUS_INT32, CHORUS_MAX, nullptr));
      RANK_EXPECT(sum == 3);
    }

    // The parent destroyed first: its child keeps the connections and goes on.
    RANK_CHECK(chorus_barrier(comm, nullptr));
    chorus_comm_destroy(comm);
    comm = nullptr;
    RANK_CHECK(chorus_allreduce(half.get(), &rank, &sum, 1, CHORUS_INT32, CHORUS_MIN, nullptr));
    RANK_EXPECT(sum == color);
    return std::string();
  });
  for (int rank = 0; rank < 4; ++rank) {
    INFO("rank " << rank << ": " << failures[rank]);
    CHECK(failures[rank].empty());
  }
}

TEST_CASE("shrink: the survivors go on without an excluded rank", "[c_api]") {
  const std::vector<std::string> failures = RunRanks(3, [](chorus_comm_t* comm, int rank) {
    // Rank 2 is excluded: it never calls shrink, and nothing waits on it.
    if (rank == 2) return std::string();
    chorus_comm_t* made = reinterpret_cast<chorus_comm_t*>(1);
    const int self[] = {rank}, outside[] = {3}, twice[] = {2, 2}, excluded[] = {2};
    RANK_EXPECT(chorus_comm_shrink(comm, self, 1, &made) == CHORUS_ERR_INVALID_ARGUMENT);
    RANK_EXPECT(made == nullptr);
    RANK_EXPECT(chorus_comm_shrink(comm, outside, 1, &made) == CHORUS_ERR_INVALID_ARGUMENT);
    RANK_EXPECT(chorus_comm_shrink(comm, twice, 2, &made) == CHORUS_ERR_INVALID_ARGUMENT);
    RANK_EXPECT(chorus_comm_shrink(comm, nullptr, 1, &made) == CHORUS_ERR_INVALID_ARGUMENT);
    RANK_EXPECT(chorus_comm_shrink(comm, excluded, 1, nullptr) == CHORUS_ERR_INVALID_ARGUMENT);

    RANK_CHECK(chorus_comm_shrink(comm, excluded, 1, &made));
    OwnedComm survivors = Owned(made);
    RANK_EXPECT(chorus_comm_size(survivors.get()) == 2);
    RANK_EXPECT(chorus_comm_rank(survivors.get()) == rank);
    double value = rank + 1, sum = 0;
    RANK_CHECK(
        chorus_allreduce(survivors.get(), &value, &sum, 1, CHORUS_FLOAT64, CHORUS_SUM, nullptr));
    RANK_EXPECT(sum == 3.0);
    return std::string();
  });
  for (int rank = 0; rank < 3; ++rank) {
    INFO("rank " << rank << ": " << failures[rank]);
    CHECK(failures[rank].empty());
  }
}

TEST_CASE("abort fails the other ranks' pending collective", "[c_api]") {
  const std::vector<std::string> failures = RunRanks(2, [](chorus_comm_t* comm, int rank) {
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      chorus_comm_abort(comm, "test abort");
      return std::string();
    }
    int32_t x = 1, y = 0;
    const chorus_error_t error =
        chorus_allreduce(comm, &x, &y, 1, CHORUS_INT32, CHORUS_SUM, nullptr);
    RANK_EXPECT(error == CHORUS_ERR_PEER_UNAVAILABLE || error == CHORUS_ERR_ABORTED);
    RANK_EXPECT(std::strlen(chorus_last_error()) > 0);
    return std::string();
  });
  CHECK(failures[0].empty());
  CHECK(failures[1].empty());
  for (const std::string& failure : failures) INFO(failure);
}


// A loopback port nobody listens on now.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  close(fd);
  return ntohs(address.sin_port);
}

TEST_CASE("a NULL url opens the store the environment names", "[c_api]") {
  for (const char* name : {"CHORUS_STORE", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"}) {
    unsetenv(name);
  }
  chorus_store_t* store = nullptr;
  CHECK(chorus_store_open(nullptr, &store) == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(std::string(chorus_last_error()).find("CHORUS_STORE") != std::string::npos);

  // torchrun's variables: rank 0 serves a tcp store on MASTER_PORT + 1, rank 1 connects.
  const int port = FreePort();
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port - 1).c_str(), 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "0", 1);
  chorus_store_t* served = nullptr;
  REQUIRE(chorus_store_open("", &served) == CHORUS_OK);
  setenv("RANK", "1", 1);
  chorus_store_t* client = nullptr;
  REQUIRE(chorus_store_open(nullptr, &client) == CHORUS_OK);
  // Two ranks meet through it: a communicator over the two stores works.
  std::vector<std::string> failures(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      chorus_device_t* device = nullptr;
      chorus_comm_t* comm = nullptr;
      float value = static_cast<float>(rank + 1);
      if (chorus_device_create("tcp", &device) != CHORUS_OK ||
          chorus_comm_create(rank == 0 ? served : client, "env", device, rank, 2, nullptr,
                             &comm) != CHORUS_OK ||
          chorus_allreduce(comm, &value, &value, 1, CHORUS_FLOAT32, CHORUS_SUM, nullptr) !=
              CHORUS_OK) {
        failures[rank] = chorus_last_error();
      } else if (value != 3.0f) {
        failures[rank] = "wrong sum " + std::to_string(value);
      }
      chorus_comm_destroy(comm);
      chorus_device_destroy(device);
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(failures[0] == "");
  CHECK(failures[1] == "");
  chorus_store_destroy(client);
  chorus_store_destroy(served);
  for (const char* name : {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"}) unsetenv(name);
}

}  // namespace
