// ProgressEngine::ReadHandler: a waiter that knows its socket reads it without epoll, and only
// when reading is all the socket's handler waits for.
#include "chorus/transport/tcp/progress_engine.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "catch2/catch.hpp"

namespace chorus::testing {
namespace {

// Reads whatever its socket holds on every event; says whether it only reads as told.
class ReadingHandler : public tcp::EventHandler {
 public:
  explicit ReadingHandler(int fd) : fd_(fd) {}
  void OnEvents(uint32_t events) override {
    events_.push_back(events);
    uint8_t buffer[64];
    for (ssize_t got; (got = recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT)) > 0;) {
      bytes_ += got;
    }
  }
  bool OnlyReads() const override { return only_reads_; }

  int fd_;
  bool only_reads_ = true;
  std::vector<uint32_t> events_;
  int64_t bytes_ = 0;
};

struct SocketPair {
  SocketPair() { REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0); }
  ~SocketPair() {
    close(fds[0]);
    close(fds[1]);
  }
  void Write(int bytes) {
    const std::vector<uint8_t> data(bytes, 7);
    REQUIRE(write(fds[1], data.data(), data.size()) == bytes);
  }
  int fds[2];
};

TEST_CASE("ReadHandler runs a handler that only reads, as if its socket were readable") {
  auto engine = tcp::ProgressEngine::Create(absl::Microseconds(50));
  REQUIRE(engine.ok());
  SocketPair sockets;
  ReadingHandler handler(sockets.fds[0]);
  uint64_t token = 0;
  {
    std::lock_guard<std::mutex> lock((*engine)->mu());
    token = (*engine)->Register(sockets.fds[0], EPOLLIN, &handler);
  }

  sockets.Write(4);
  CHECK((*engine)->ReadHandler(token));
  CHECK(handler.events_ == std::vector<uint32_t>{EPOLLIN});
  CHECK(handler.bytes_ == 4);

  // Nothing there: the handler still runs (it reads nothing), and says so with its count.
  CHECK((*engine)->ReadHandler(token));
  CHECK(handler.events_.size() == 2);
  CHECK(handler.bytes_ == 4);

  SECTION("not a handler that also waits to write: the caller polls the engine instead") {
    handler.only_reads_ = false;
    sockets.Write(4);
    CHECK_FALSE((*engine)->ReadHandler(token));
    CHECK(handler.events_.size() == 2);
    (*engine)->PollOnce(0, nullptr);  // epoll reports the bytes
    CHECK(handler.bytes_ == 8);
  }
  SECTION("not while another thread holds the engine's mutex") {
    sockets.Write(4);
    std::atomic<bool> locked{false}, done{false};
    std::thread holder([&] {
      std::lock_guard<std::mutex> lock((*engine)->mu());
      locked = true;
      while (!done) std::this_thread::yield();
    });
    while (!locked) std::this_thread::yield();
    CHECK_FALSE((*engine)->ReadHandler(token));
    done = true;
    holder.join();
    CHECK(handler.bytes_ == 4);
  }
  SECTION("not a handler that is gone") {
    {
      std::lock_guard<std::mutex> lock((*engine)->mu());
      (*engine)->Unregister(token, sockets.fds[0]);
    }
    sockets.Write(4);
    CHECK_FALSE((*engine)->ReadHandler(token));
    CHECK(handler.events_.size() == 2);
  }
}

}  // namespace
}  // namespace chorus::testing
