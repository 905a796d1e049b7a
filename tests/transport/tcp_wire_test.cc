// The TCP transport's pure codecs: frame headers, handshakes, published addresses, interface lists.
#include <catch2/catch.hpp>
#include <cstring>

#include "absl/strings/match.h"
#include "chorus/core/status.h"
#include "chorus/transport/tcp/handshake.h"
#include "chorus/core/socket.h"
#include "chorus/transport/tcp/wire_format.h"

namespace chorus::tcp {
namespace {

constexpr uint64_t kMax = uint64_t{1} << 30;

TEST_CASE("frame headers round-trip and malformed ones are refused") {
  FrameHeader header;
  header.kind = FrameKind::kStart;
  header.seq = 12;
  header.tag = 0xDEADBEEFCAFEull;
  header.total_length = 1000;
  header.length = 600;
  const EncodedFrameHeader bytes = EncodeFrameHeader(header);
  auto decoded = DecodeFrameHeader(bytes, kMax);
  REQUIRE(decoded.ok());
  CHECK(decoded->seq == 12);
  CHECK(decoded->tag == header.tag);
  CHECK(decoded->total_length == 1000);
  CHECK(decoded->length == 600);

  CHECK_FALSE(DecodeFrameHeader(absl::MakeConstSpan(bytes.data(), 47), kMax).ok());
  CHECK_FALSE(DecodeFrameHeader(bytes, 999).ok());  // over the maximum message size
  auto mutate = [&](auto change) {
    FrameHeader bad = header;
    change(bad);
    return DecodeFrameHeader(EncodeFrameHeader(bad), kMax).status();
  };
  CHECK(!mutate([](FrameHeader& h) { h.length = 1001; }).ok());
  CHECK(!mutate([](FrameHeader& h) { h.offset = 5; }).ok());  // a start frame not at 0
  CHECK(!mutate([](FrameHeader& h) {
           h.kind = FrameKind::kChunk;
           h.offset = ~uint64_t{0} - 10;  // offset + length overflows
           h.tag = 0;
         }).ok());
  CHECK(!mutate([](FrameHeader& h) { h.kind = FrameKind::kChunk; }).ok());  // chunk with a tag
  EncodedFrameHeader unknown = bytes;
  unknown[0] = 9;
  CHECK_FALSE(DecodeFrameHeader(unknown, kMax).ok());
  EncodedFrameHeader reserved = bytes;
  reserved[5] = 1;
  CHECK_FALSE(DecodeFrameHeader(reserved, kMax).ok());
}

TEST_CASE("handshakes round-trip and every malformed field is refused") {
  Hello hello;
  hello.stream_index = 1;
  hello.job_id = 77;
  hello.target_mesh_id = 0x1111;
  hello.source_mesh_id = 0x2222;
  hello.source_rank = 3;
  hello.target_rank = 4;
  hello.stream_count = 2;
  hello.dial_id = 99;
  auto bytes = EncodeHello(hello);
  auto decoded = DecodeHello(bytes);
  REQUIRE(decoded.ok());
  CHECK(decoded->job_id == 77);
  CHECK(decoded->source_rank == 3);
  CHECK(decoded->target_rank == 4);
  CHECK(decoded->dial_id == 99);

  auto bad_magic = bytes;
  bad_magic[0] = 'X';
  CHECK(absl::StrContains(DecodeHello(bad_magic).status().message(), "magic"));
  auto bad_version = bytes;
  bad_version[8] = 9;
  CHECK(absl::StrContains(DecodeHello(bad_version).status().message(), "version"));
  auto reserved = bytes;
  reserved[53] = 1;
  CHECK_FALSE(DecodeHello(reserved).ok());
  hello.stream_index = 2;  // not below stream_count
  CHECK_FALSE(DecodeHello(EncodeHello(hello)).ok());
  CHECK_FALSE(DecodeHello(absl::MakeConstSpan(bytes.data(), 63)).ok());

  for (uint16_t v = 0; v <= kMaxVerdict; ++v) {
    const auto verdict = static_cast<HandshakeVerdict>(v);
    auto reply = DecodeReply(EncodeReply(verdict));
    REQUIRE(reply.ok());
    CHECK(*reply == verdict);
    CHECK_FALSE(VerdictName(verdict).empty());
  }
  auto reply = EncodeReply(HandshakeVerdict::kAccepted);
  reply[10] = kMaxVerdict + 1;
  CHECK_FALSE(DecodeReply(reply).ok());
}

TEST_CASE("published addresses round-trip; malformed ones are refused") {
  const PublishedAddress published{"[::1]:4000", 0xABCDEF0123456789ull};
  const std::string text = FormatPublishedAddress(published);
  CHECK(text == "[::1]:4000;mesh=abcdef0123456789");
  auto parsed = ParsePublishedAddress(text);
  REQUIRE(parsed.ok());
  CHECK(parsed->socket_address == "[::1]:4000");
  CHECK(parsed->mesh_id == published.mesh_id);
  CHECK_FALSE(ParsePublishedAddress("127.0.0.1:4000").ok());
  CHECK_FALSE(ParsePublishedAddress(";mesh=12").ok());
  CHECK_FALSE(ParsePublishedAddress("1.2.3.4:5;mesh=zz").ok());
}

TEST_CASE("socket addresses parse and print for IPv4 and IPv6") {
  auto v4 = SocketAddress::Parse("127.0.0.1:80");
  REQUIRE(v4.ok());
  CHECK(v4->ToString() == "127.0.0.1:80");
  CHECK(v4->IsLoopback());
  auto v6 = SocketAddress::Parse("[::1]:8080");
  REQUIRE(v6.ok());
  CHECK(v6->ToString() == "[::1]:8080");
  CHECK(v6->IsLoopback());
  CHECK(SocketAddress::FromIp("fe80::1", 0)->IsLinkLocal());
  CHECK_FALSE(SocketAddress::Parse("localhost:80").ok());  // no DNS
  CHECK_FALSE(SocketAddress::Parse("1.2.3.4:70000").ok());
  CHECK_FALSE(SocketAddress::Parse("::1:80").ok());
}

TEST_CASE("interface lists choose as NCCL users expect") {
  std::vector<InterfaceAddress> candidates = {
      {"lo", *SocketAddress::FromIp("127.0.0.1", 0)},
      {"lo", *SocketAddress::FromIp("::1", 0)},
      {"docker0", *SocketAddress::FromIp("172.17.0.1", 0)},
      {"eth0", *SocketAddress::FromIp("fe80::1", 0)},
      {"eth0", *SocketAddress::FromIp("fd00::2", 0)},
      {"eth0", *SocketAddress::FromIp("192.0.2.2", 0)},
      {"eth10", *SocketAddress::FromIp("198.51.100.1", 0)},
  };
  auto choose = [&](const char* text, AddressFamily family = AddressFamily::kAny) {
    auto spec = InterfaceSpec::Parse(text);
    REQUIRE(spec.ok());
    return ChooseInterfaceAddress(candidates, *spec, family, text);
  };
  CHECK(choose("eth0")->address.IpString() == "192.0.2.2");                      // IPv4 first
  CHECK(choose("eth0", AddressFamily::kIPv6)->address.IpString() == "fd00::2");  // not link-local
  CHECK(choose("=eth10")->interface == "eth10");
  CHECK(choose("eth1")->interface == "eth10");  // prefix
  CHECK_FALSE(choose("=eth1").ok());            // exact
  CHECK(choose("^lo,docker")->interface == "eth0");
  CHECK(choose("^=eth0,lo,docker0")->interface == "eth10");
  CHECK(choose("lo", AddressFamily::kIPv6)->address.IpString() == "::1");
  auto none = choose("^lo,docker,eth");
  REQUIRE_FALSE(none.ok());
  CHECK(absl::StrContains(none.status().message(), "no usable address"));
  CHECK(absl::StrContains(none.status().message(), "eth0 192.0.2.2"));  // shows what exists
  CHECK_FALSE(InterfaceSpec::Parse("").ok());
  CHECK_FALSE(InterfaceSpec::Parse("=").ok());
}

}  // namespace
}  // namespace chorus::tcp
