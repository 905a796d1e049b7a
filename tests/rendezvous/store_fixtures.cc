#include "tests/rendezvous/store_fixtures.h"

#include <catch2/catch.hpp>

#include "tests/security/test_certificates.h"

namespace chorus::testing {
namespace {

template <typename T>
T ValueOrFail(absl::StatusOr<T> value) {
  if (!value.ok()) FAIL("store fixture setup failed: " << value.status().ToString());
  return *std::move(value);
}

}  // namespace

FileStoreFixture::FileStoreFixture()
    : store_(ValueOrFail(FileStore::Open(dir_.path() + "/store"))) {}

PrefixStoreFixture::PrefixStoreFixture()
    : store_(std::make_unique<PrefixStore>("communicator-7", inner_.store())) {}

RedisStoreFixture::RedisStoreFixture() : server_(ValueOrFail(RedisServer::Start())) {
  RedisStoreOptions options;
  options.host = server_->host();
  options.port = server_->port();
  store_ = ValueOrFail(RedisStore::Connect(options));
}

TcpStoreOptions ServedOnLoopback() {
  TcpStoreOptions options;
  options.host = "127.0.0.1";
  options.port = PickFreeLoopbackPort();
  options.serve = true;
  return options;
}

TcpStoreFixture::TcpStoreFixture() { store_ = ValueOrFail(TcpStore::Open(ServedOnLoopback())); }

SecureTcpStoreFixture::SecureTcpStoreFixture() {
  TcpStoreOptions options = ServedOnLoopback();
  options.security.auth = security::AuthKey{"store-conformance-job-secret", "test"};
  options.security.tls = ValueOrFail(security::TlsContext::Create(MemberTlsFiles()));
  store_ = ValueOrFail(TcpStore::Open(options));
}

}  // namespace chorus::testing
