// Secured TCP links between real ranks (threads of this process on loopback): the job secret
// and TLS let members in and keep others out with a clear error on both sides, and a
// man-in-the-middle that flips a byte of a TLS link fails the transfer instead of corrupting it.
// The conformance suite runs every transport promise over TLS with a secret ("tcp-tls-2-streams").
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "chorus/core/security/link_security.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/memory_store.h"
#include "chorus/transport/tcp/tcp_device.h"
#include "tests/harness/multirank.h"
#include "tests/security/test_certificates.h"
#include "tests/transport/captured_log.h"
#include "tests/transport/scenario.h"

namespace chorus::testing {
namespace {

using tcp::TcpDeviceOptions;

constexpr absl::Duration kSetup = absl::Seconds(20);
const security::AuthKey kJobSecret{"the-job-secret-of-this-test", "CHORUS_AUTH_KEY"};

TcpDeviceOptions Loopback(std::optional<security::AuthKey> auth = std::nullopt,
                          const security::TlsFiles* tls = nullptr) {
  TcpDeviceOptions options;
  options.address = "127.0.0.1";
  options.handshake_timeout = absl::Seconds(2);
  options.security.auth = std::move(auth);
  if (tls != nullptr) {
    auto context = security::TlsContext::Create(*tls);
    REQUIRE(context.ok());
    options.security.tls = *context;
  }
  return options;
}

// A store that shows values with `from` replaced by `to`: what a rank reads through it sends
// it to `to` instead of `from` (a man-in-the-middle's address instead of the peer's).
class RewritingStore : public Store {
 public:
  RewritingStore(Store& inner, std::string from, std::string to)
      : inner_(inner), from_(std::move(from)), to_(std::move(to)) {}
  absl::Status Set(absl::string_view key, absl::string_view value) override {
    return inner_.Set(key, value);
  }
  absl::StatusOr<std::string> Get(absl::string_view key, Deadline deadline) override {
    CHORUS_ASSIGN_OR_RETURN(std::string value, inner_.Get(key, deadline));
    return Rewrite(value);
  }
  absl::StatusOr<std::optional<std::string>> TryGet(absl::string_view key) override {
    CHORUS_ASSIGN_OR_RETURN(std::optional<std::string> value, inner_.TryGet(key));
    if (value) *value = Rewrite(*value);
    return value;
  }
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override {
    return inner_.Add(key, delta);
  }
  absl::Status Delete(absl::string_view key) override { return inner_.Delete(key); }
  absl::StatusOr<std::vector<std::string>> MultiGet(absl::Span<const std::string> keys,
                                                    Deadline deadline) override {
    CHORUS_ASSIGN_OR_RETURN(std::vector<std::string> values, inner_.MultiGet(keys, deadline));
    for (std::string& value : values) value = Rewrite(value);
    return values;
  }
  std::string Describe() const override { return "rewriting " + inner_.Describe(); }

 private:
  std::string Rewrite(const std::string& value) const {
    return absl::StrReplaceAll(value, {{from_, to_}});
  }
  Store& inner_;
  const std::string from_;
  const std::string to_;
};

// A TCP relay on loopback to `target` that flips one bit of the byte at `flip_at` (counted
// over everything the dialing side sends, across connections) and relays the rest unchanged.
// Stops and closes everything on destruction; bounded by its own 30 s lifetime.
class FlippingProxy {
 public:
  FlippingProxy(const SocketAddress& target, uint64_t flip_at)
      : target_(target), flip_at_(flip_at) {
    auto loopback = SocketAddress::FromIp("127.0.0.1", 0);
    REQUIRE(loopback.ok());
    address_ = *loopback;
    auto listener = Listen(address_, 0);
    REQUIRE(listener.ok());
    listener_ = *std::move(listener);
    thread_ = std::thread([this] { Run(); });
  }
  ~FlippingProxy() {
    stop_ = true;
    thread_.join();
  }
  const SocketAddress& address() const { return address_; }
  bool flipped() const { return flipped_; }

 private:
  struct Pair {
    ScopedFd client;
    ScopedFd server;
  };

  void Run() {
    std::vector<Pair> pairs;
    const Deadline lifetime = Deadline::After(absl::Seconds(30));
    while (!stop_ && !lifetime.Expired()) {
      std::vector<pollfd> fds{{listener_.get(), POLLIN, 0}};
      for (const Pair& pair : pairs) {
        fds.push_back({pair.client.get(), POLLIN, 0});
        fds.push_back({pair.server.get(), POLLIN, 0});
      }
      if (poll(fds.data(), fds.size(), 20) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        ScopedFd client(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        ScopedFd server(socket(target_.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (client.valid() && server.valid() &&
            connect(server.get(), target_.sockaddr_ptr(), target_.length()) == 0) {
          pairs.push_back({std::move(client), std::move(server)});
        }
        continue;  // the pairs' indices in `fds` changed
      }
      for (size_t i = 0; i < pairs.size(); ++i) {
        if ((fds[1 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR)) &&
            !Relay(pairs[i].client.get(), pairs[i].server.get(), /*upstream=*/true)) {
          pairs[i] = Pair{};
        } else if ((fds[2 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR)) &&
                   !Relay(pairs[i].server.get(), pairs[i].client.get(), /*upstream=*/false)) {
          pairs[i] = Pair{};
        }
      }
      pairs.erase(std::remove_if(pairs.begin(), pairs.end(),
                                 [](const Pair& pair) { return !pair.client.valid(); }),
                  pairs.end());
    }
  }

  // Moves what `from` has to `to`; false once either side is closed.
  bool Relay(int from, int to, bool upstream) {
    uint8_t buffer[65536];
    const ssize_t got = recv(from, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (got <= 0) return got < 0 && (errno == EAGAIN || errno == EINTR);
    if (upstream) {
      if (!flipped_ && flip_at_ >= upstream_bytes_ &&
          flip_at_ < upstream_bytes_ + static_cast<uint64_t>(got)) {
        buffer[flip_at_ - upstream_bytes_] ^= 0x04;
        flipped_ = true;
      }
      upstream_bytes_ += static_cast<uint64_t>(got);
    }
    for (ssize_t sent = 0; sent < got;) {
      const ssize_t n = send(to, buffer + sent, static_cast<size_t>(got - sent), MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += n;
    }
    return true;
  }

  const SocketAddress target_;
  const uint64_t flip_at_;
  ScopedFd listener_;
  SocketAddress address_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> flipped_{false};
  uint64_t upstream_bytes_ = 0;
  std::thread thread_;
};

// Two ranks as threads with their own options; rank 0 reads the store through `rank0_store`
// when given. Returns each rank's setup status; meshes are left in `meshes`.
struct Pair {
  std::vector<std::unique_ptr<Device>> devices{2};
  std::vector<std::unique_ptr<Mesh>> meshes{2};
  MemoryStore store;
  ~Pair() {
    meshes.clear();
    devices.clear();
  }
  void CreateDevices(const TcpDeviceOptions& rank0, const TcpDeviceOptions& rank1) {
    auto device0 = tcp::CreateTcpDevice(rank0);
    auto device1 = tcp::CreateTcpDevice(rank1);
    REQUIRE(device0.ok());
    REQUIRE(device1.ok());
    devices[0] = *std::move(device0);
    devices[1] = *std::move(device1);
  }
  void CreateMeshes(Store* rank0_store = nullptr) {
    const auto statuses = RunRanksAsThreads(
        2,
        [&](int rank) -> absl::Status {
          Store& view = rank == 0 && rank0_store != nullptr ? *rank0_store : store;
          CHORUS_ASSIGN_OR_RETURN(meshes[rank], devices[rank]->CreateMesh(
                                                    view, rank, 2, {}, Deadline::After(kSetup)));
          return absl::OkStatus();
        },
        absl::Seconds(30));
    for (const absl::Status& status : statuses) REQUIRE(status.ok());
  }
  // Rank 0 sends `size` bytes to rank 1; both statuses, rank 1's first.
  std::pair<absl::Status, absl::Status> Transfer(size_t size) {
    auto to = meshes[0]->GetConnection(1);
    auto from = meshes[1]->GetConnection(0);
    REQUIRE(to.ok());
    REQUIRE(from.ok());
    const std::vector<uint8_t> data = Pattern(11, size);
    std::vector<uint8_t> buffer(size);
    RequestPtr receive = (*from)->Recv(1, buffer.data(), size);
    RequestPtr send = (*to)->Send(1, data.data(), size);
    const absl::Status received = receive->Wait(Deadline::After(absl::Seconds(10)));
    const absl::Status sent = send->Wait(Deadline::After(absl::Seconds(10)));
    if (received.ok() && buffer != data) {
      return {InternalError("the bytes arrived changed"), sent};
    }
    return {received, sent};
  }
};

// Rank 0 sends to rank 1 over a link one side must refuse: it fails at once, not after the
// connect timeout, and rank 1's receive never gets a byte. Returns rank 0's status, which says
// why the link was refused.
absl::Status RefusedTransfer(Pair& pair) {
  const absl::Time start = absl::Now();
  auto [received, sent] = pair.Transfer(1000);
  CHECK(absl::Now() - start < absl::Seconds(5));
  INFO(sent.ToString());
  REQUIRE_FALSE(sent.ok());
  CHECK(GetErrorKind(sent) == ErrorKind::kPeerUnavailable);
  CHECK(ErrorPeerRank(sent) == 1);
  CHECK(absl::StrContains(sent.message(), "could not be secured"));
  CHECK_FALSE(received.ok());  // at its own deadline
  return sent;
}

TEST_CASE("ranks with the same job secret connect; TLS and secret together too", "[security]") {
  const security::TlsFiles member = MemberTlsFiles();
  const bool with_tls = GENERATE(false, true);
  DYNAMIC_SECTION((with_tls ? "TLS and secret" : "secret")) {
    Pair pair;
    const TcpDeviceOptions options = Loopback(kJobSecret, with_tls ? &member : nullptr);
    pair.CreateDevices(options, options);
    pair.CreateMeshes();
    for (size_t size : {size_t{1}, size_t{100000}, size_t{4} << 20}) {
      const auto [received, sent] = pair.Transfer(size);
      INFO(size << " bytes: " << received << " / " << sent);
      CHECK(received.ok());
      CHECK(sent.ok());
    }
  }
}

TEST_CASE("a rank without the secret, or with another, is refused on both sides", "[security]") {
  struct Case {
    const char* name;
    std::optional<security::AuthKey> dialer;
    std::optional<security::AuthKey> acceptor;
    const char* dialer_says;
    const char* acceptor_logs;
  };
  const security::AuthKey other{"a-secret-of-another-job-entirely", "CHORUS_AUTH_KEY"};
  const Case cases[] = {
      {"no secret", std::nullopt, kJobSecret, "this process has none", "sent no proof"},
      {"another secret", other, kJobSecret, "the job secrets differ", "does not match"},
      {"a secret the acceptor lacks", kJobSecret, std::nullopt, "has no job secret",
       "this process holds none"},
  };
  for (const Case& test : cases) {
    DYNAMIC_SECTION(test.name) {
      CapturedLog log;
      Pair pair;
      pair.CreateDevices(Loopback(test.dialer), Loopback(test.acceptor));
      pair.CreateMeshes();
      const absl::Status sent = RefusedTransfer(pair);
      CHECK(absl::StrContains(sent.message(), test.dialer_says));
      CHECK(absl::StrContains(sent.message(), "CHORUS_AUTH_KEY"));
      // The acceptor logs from its own thread, possibly after the dialer has failed.
      const std::string text = log.ReadOnce(test.acceptor_logs);
      INFO(text);
      CHECK(absl::StrContains(text, "refused connection from 127.0.0.1:"));
      CHECK(absl::StrContains(text, test.acceptor_logs));
    }
  }
}

TEST_CASE("a rank whose certificate another CA signed is refused on both sides", "[security]") {
  CapturedLog log;
  const security::TlsFiles member = MemberTlsFiles();
  const security::TlsFiles stranger = StrangerTlsFiles();
  Pair pair;
  pair.CreateDevices(Loopback(std::nullopt, &stranger), Loopback(std::nullopt, &member));
  pair.CreateMeshes();
  const absl::Status sent = RefusedTransfer(pair);
  CHECK(absl::StrContains(sent.message(), "CHORUS_TLS_CA"));
  // The acceptor logs from its own thread, possibly after the dialer has failed; the dialer's
  // own lines already say "TLS handshake", so wait for the acceptor's.
  const std::string text = log.ReadOnce("refused connection from 127.0.0.1:");
  INFO(text);
  CHECK(absl::StrContains(text, "refused connection from 127.0.0.1:"));
  CHECK(absl::StrContains(text, "TLS handshake"));
}

TEST_CASE("a rank without TLS and ranks with it refuse each other at once, saying so",
          "[security]") {
  const security::TlsFiles member = MemberTlsFiles();
  const bool dialer_uses_tls = GENERATE(false, true);
  DYNAMIC_SECTION((dialer_uses_tls ? "TLS dialer, plain acceptor" : "plain dialer, TLS acceptor")) {
    CapturedLog log;
    Pair pair;
    const TcpDeviceOptions plain = Loopback();
    const TcpDeviceOptions tls = Loopback(std::nullopt, &member);
    pair.CreateDevices(dialer_uses_tls ? tls : plain, dialer_uses_tls ? plain : tls);
    pair.CreateMeshes();
    const absl::Status sent = RefusedTransfer(pair);
    CHECK(absl::StrContains(sent.message(), dialer_uses_tls ? "does it use TLS?"
                                                            : "the peer requires TLS"));
    const char* logged = dialer_uses_tls ? "the peer speaks TLS" : "the peer does not use TLS";
    const std::string text = log.ReadOnce(logged);
    INFO(text);
    CHECK(absl::StrContains(text, logged));
  }
}

// Rank 0 sends 1 MiB to rank 1 through a proxy that flips one bit of a byte well past the TLS
// handshake and the challenge-response (a few KiB), inside the data.
struct ProxiedTransfer {
  absl::Status received;
  absl::Status sent;
  bool flipped = false;
};

ProxiedTransfer TransferThroughFlippingProxy(const TcpDeviceOptions& options) {
  Pair pair;
  pair.CreateDevices(options, options);
  auto rank1 = SocketAddress::Parse(pair.devices[1]->address());
  REQUIRE(rank1.ok());
  FlippingProxy proxy(*rank1, /*flip_at=*/200000);
  RewritingStore through_proxy(pair.store, pair.devices[1]->address(), proxy.address().ToString());
  pair.CreateMeshes(&through_proxy);
  const auto [received, sent] = pair.Transfer(size_t{1} << 20);
  return {received, sent, proxy.flipped()};
}

TEST_CASE("a man-in-the-middle flipping a byte of a TLS link is detected", "[security]") {
  const security::TlsFiles member = MemberTlsFiles();
  const ProxiedTransfer transfer = TransferThroughFlippingProxy(Loopback(kJobSecret, &member));
  CHECK(transfer.flipped);
  INFO(transfer.received.ToString());
  REQUIRE_FALSE(transfer.received.ok());
  CHECK(GetErrorKind(transfer.received) == ErrorKind::kPeerUnavailable);
  CHECK(ErrorPeerRank(transfer.received) == 0);
  CHECK((absl::StrContains(transfer.received.message(), "bad record mac") ||
         absl::StrContains(transfer.received.message(), "decrypt")));
  CHECK(absl::StrContains(transfer.received.message(), "bytes changed on the way"));
}

TEST_CASE("a man-in-the-middle flipping a byte of a plain link goes unseen by TCP: why TLS",
          "[security]") {
  // The job secret proves who connected, not what arrives afterwards: without TLS, a byte
  // changed in flight is delivered changed. docs/security.md says so; this keeps it honest.
  const ProxiedTransfer transfer = TransferThroughFlippingProxy(Loopback(kJobSecret));
  CHECK(transfer.flipped);
  CHECK(transfer.sent.ok());
  CHECK(absl::StrContains(transfer.received.message(), "the bytes arrived changed"));
}

}  // namespace
}  // namespace chorus::testing
