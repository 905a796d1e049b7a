// TLS links (core/security/tls.h, channel.h) over socket pairs: mutual authentication with the
// committed test certificates, data both ways, a certificate of another CA refused on both
// ends, and a flipped byte in flight detected.
#include <poll.h>
#include <sys/socket.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"
#include "chorus/core/deadline.h"
#include "chorus/core/security/channel.h"
#include "chorus/core/security/link_security.h"
#include "chorus/core/security/tls.h"
#include "tests/security/test_certificates.h"

namespace chorus::security {
namespace {

using testing::MemberTlsFiles;
using testing::StrangerTlsFiles;

std::shared_ptr<TlsContext> Context(const TlsFiles& files) {
  absl::StatusOr<std::shared_ptr<TlsContext>> context = TlsContext::Create(files);
  INFO((context.ok() ? "" : std::string(context.status().message())));
  REQUIRE(context.ok());
  return *context;
}

// A connected, non-blocking pair of sockets.
std::pair<ScopedFd, ScopedFd> SocketPair() {
  int fds[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) == 0);
  return {ScopedFd(fds[0]), ScopedFd(fds[1])};
}

Channel Open(ScopedFd fd, const TlsContext& context, TlsContext::Role role) {
  absl::StatusOr<Channel> channel = Channel::Open(std::move(fd), &context, role);
  REQUIRE(channel.ok());
  return *std::move(channel);
}

// Steps both handshakes until each is done or failed, for at most five seconds, calling
// `between` after each step (by default, a short wait for either socket).
std::pair<IoResult, IoResult> HandshakeBoth(Channel& client, Channel& server,
                                            const std::function<void()>& between = nullptr) {
  IoResult a, b;
  a.kind = b.kind = IoResult::Kind::kWantRead;
  const Deadline deadline = Deadline::After(absl::Seconds(5));
  while ((a.blocked() || b.blocked()) && !deadline.Expired()) {
    if (a.blocked()) a = client.Handshake();
    if (b.blocked()) b = server.Handshake();
    if (between) {
      between();
    } else {
      pollfd fds[2] = {{client.fd(), POLLIN, 0}, {server.fd(), POLLIN, 0}};
      (void)poll(fds, 2, 10);
    }
  }
  return {a, b};
}

// Reads exactly `size` bytes (or until the link fails or five seconds pass).
IoResult ReadAll(Channel& channel, uint8_t* into, size_t size) {
  size_t got = 0;
  const Deadline deadline = Deadline::After(absl::Seconds(5));
  while (got < size && !deadline.Expired()) {
    IoResult result = channel.Read(into + got, size - got);
    if (result.done()) {
      got += result.bytes;
    } else if (result.blocked()) {
      pollfd entry{channel.fd(), POLLIN, 0};
      (void)poll(&entry, 1, 10);
    } else {
      return result;
    }
  }
  IoResult result;
  result.bytes = got;
  return result;
}

TEST_CASE("members of the job complete a mutual handshake and exchange data", "[tls]") {
  const auto context = Context(MemberTlsFiles());
  auto [a, b] = SocketPair();
  Channel client = Open(std::move(a), *context, TlsContext::Role::kClient);
  Channel server = Open(std::move(b), *context, TlsContext::Role::kServer);
  const auto [client_done, server_done] = HandshakeBoth(client, server);
  INFO(client_done.error << " | " << server_done.error);
  REQUIRE(client_done.done());
  REQUIRE(server_done.done());
  CHECK(absl::StrContains(client.PeerIdentity(), "chorus-test-member"));
  CHECK(absl::StrContains(server.PeerIdentity(), "chorus-test-member"));

  // A header and a payload gathered, as the transport writes a frame; larger than a record.
  std::vector<uint8_t> header(32), payload(100000);
  for (size_t i = 0; i < header.size(); ++i) header[i] = static_cast<uint8_t>(i);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7 + 1);
  std::vector<uint8_t> expected(header.size() + payload.size());
  std::memcpy(expected.data(), header.data(), header.size());
  std::memcpy(expected.data() + header.size(), payload.data(), payload.size());
  std::vector<uint8_t> received(expected.size());
  size_t sent = 0, got = 0;
  const Deadline deadline = Deadline::After(absl::Seconds(10));
  while (got < expected.size() && !deadline.Expired()) {
    if (sent < expected.size()) {
      iovec buffers[2];
      int count = 0;
      if (sent < header.size()) buffers[count++] = {header.data() + sent, header.size() - sent};
      const size_t payload_sent = sent > header.size() ? sent - header.size() : 0;
      buffers[count++] = {payload.data() + payload_sent, payload.size() - payload_sent};
      IoResult written = client.WriteGather(buffers, count);
      if (written.done()) sent += written.bytes;
      REQUIRE((written.done() || written.blocked()));
    }
    IoResult read = server.Read(received.data() + got, received.size() - got);
    if (read.done()) got += read.bytes;
    REQUIRE((read.done() || read.blocked()));
  }
  REQUIRE(got == expected.size());
  CHECK(received == expected);
  CHECK_FALSE(server.HasBufferedInput());

  // And back, then a clean close reads as closed.
  const std::string reply = "reply from the server";
  REQUIRE(server.Write(reply.data(), reply.size()).done());
  std::string echoed(reply.size(), '\0');
  CHECK(ReadAll(client, reinterpret_cast<uint8_t*>(echoed.data()), echoed.size()).bytes ==
        reply.size());
  CHECK(echoed == reply);
  server.Close();
  uint8_t byte;
  CHECK(ReadAll(client, &byte, 1).kind == IoResult::Kind::kClosed);
}

TEST_CASE("a certificate of another CA is refused on both ends, naming the reason", "[tls]") {
  const auto member = Context(MemberTlsFiles());
  const auto stranger = Context(StrangerTlsFiles());
  auto [a, b] = SocketPair();
  Channel client = Open(std::move(a), *stranger, TlsContext::Role::kClient);
  Channel server = Open(std::move(b), *member, TlsContext::Role::kServer);
  const auto [client_done, server_done] = HandshakeBoth(client, server);
  REQUIRE(client_done.kind == IoResult::Kind::kError);
  REQUIRE(server_done.kind == IoResult::Kind::kError);
  INFO(client_done.error << " | " << server_done.error);
  // Each end refuses the other's certificate: neither is signed by a CA the other trusts.
  CHECK((absl::StrContains(server_done.error, "certificate") ||
         absl::StrContains(client_done.error, "certificate")));
}

TEST_CASE("a byte flipped in flight fails the reading end", "[tls]") {
  const auto context = Context(MemberTlsFiles());
  // client <-> [relay] <-> server, the relay being this test.
  auto [client_fd, relay_client] = SocketPair();
  auto [relay_server, server_fd] = SocketPair();
  Channel client = Open(std::move(client_fd), *context, TlsContext::Role::kClient);
  Channel server = Open(std::move(server_fd), *context, TlsContext::Role::kServer);
  bool tamper = false;
  auto relay = [&](int from, int to) {
    uint8_t buffer[65536];
    const ssize_t got = recv(from, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (got <= 0) return;
    if (tamper && got > 40) buffer[got - 20] ^= 0x10;  // inside the record, past its header
    REQUIRE(send(to, buffer, static_cast<size_t>(got), MSG_NOSIGNAL) == got);
  };
  const auto [a, b] = HandshakeBoth(client, server, [&] {
    relay(relay_client.get(), relay_server.get());
    relay(relay_server.get(), relay_client.get());
  });
  REQUIRE(a.done());
  REQUIRE(b.done());

  tamper = true;
  const std::string message(1000, 'x');
  REQUIRE(client.Write(message.data(), message.size()).done());
  relay(relay_client.get(), relay_server.get());
  std::vector<uint8_t> received(message.size());
  const IoResult read = ReadAll(server, received.data(), received.size());
  REQUIRE(read.kind == IoResult::Kind::kError);
  INFO(read.error);
  CHECK((absl::StrContains(read.error, "bad record mac") ||
         absl::StrContains(read.error, "decrypt")));
}

TEST_CASE("unusable TLS settings are refused when read, naming what is wrong", "[tls]") {
  struct Case {
    const char* name;
    void (*change)(TlsFiles&);
    const char* message;
  };
  const Case cases[] = {
      {"a certificate the CA did not sign",
       [](TlsFiles& files) { files = {StrangerTlsFiles().certificate,
                                      StrangerTlsFiles().private_key, MemberTlsFiles().ca}; },
       "is not accepted by the CA"},
      {"a key that belongs to another certificate",
       [](TlsFiles& files) { files.private_key = StrangerTlsFiles().private_key; },
       "CHORUS_TLS_KEY"},
      {"a missing file", [](TlsFiles& files) { files.certificate = "/nonexistent/cert.pem"; },
       "/nonexistent/cert.pem"},
  };
  for (const Case& test : cases) {
    DYNAMIC_SECTION(test.name) {
      TlsFiles files = MemberTlsFiles();
      test.change(files);
      const auto context = TlsContext::Create(files);
      REQUIRE_FALSE(context.ok());
      CHECK(absl::StrContains(context.status().message(), test.message));
    }
  }
  SECTION("only some of the variables") {
    testing::ScopedEnv certificate("CHORUS_TLS_CERT", MemberTlsFiles().certificate.c_str());
    const auto security = LinkSecurity::FromEnv();
    REQUIRE_FALSE(security.ok());
    CHECK(absl::StrContains(security.status().message(), "CHORUS_TLS_KEY and CHORUS_TLS_CA"));
  }
  SECTION("a short secret") {
    testing::ScopedEnv secret("CHORUS_AUTH_KEY", "short");
    const auto security = LinkSecurity::FromEnv();
    REQUIRE_FALSE(security.ok());
    CHECK(absl::StrContains(security.status().message(), "at least 16"));
  }
  SECTION("everything set: both in use") {
    testing::ScopedTlsEnv tls(MemberTlsFiles());
    testing::ScopedEnv secret("CHORUS_AUTH_KEY", "0123456789abcdef0123");
    const auto security = LinkSecurity::FromEnv();
    REQUIRE(security.ok());
    CHECK(security->Describe() == "TLS and job secret");
  }
}

}  // namespace
}  // namespace chorus::security
