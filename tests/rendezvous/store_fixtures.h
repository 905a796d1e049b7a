// The stores the conformance suite runs against, one fixture type each. A fixture owns whatever
// its store needs (a temp directory, a redis-server) and exposes `Store& store()`; it fails the
// running Catch2 test when it cannot set its store up.
#ifndef CHORUS_TESTS_RENDEZVOUS_STORE_FIXTURES_H_
#define CHORUS_TESTS_RENDEZVOUS_STORE_FIXTURES_H_

#include <memory>
#include <string>

#include "chorus/rendezvous/file_store.h"
#include "chorus/rendezvous/memory_store.h"
#include "chorus/rendezvous/prefix_store.h"
#include "chorus/rendezvous/redis_store.h"
#include "chorus/rendezvous/tcp_store.h"
#include "tests/harness/multirank.h"
#include "tests/harness/redis_server.h"

namespace chorus::testing {

class MemoryStoreFixture {
 public:
  static constexpr const char* kName = "memory store";
  Store& store() { return store_; }

 private:
  MemoryStore store_;
};

class FileStoreFixture {
 public:
  static constexpr const char* kName = "file store";
  FileStoreFixture();
  Store& store() { return *store_; }

 private:
  TempDir dir_;
  std::unique_ptr<FileStore> store_;
};

// A prefix over a file store: keys gain a '/', which the file store must escape.
class PrefixStoreFixture {
 public:
  static constexpr const char* kName = "prefix store";
  PrefixStoreFixture();
  Store& store() { return *store_; }

 private:
  FileStoreFixture inner_;
  std::unique_ptr<PrefixStore> store_;
};

// A store on a redis-server started for this fixture alone. Fails the test (does not skip)
// when redis-server is missing.
class RedisStoreFixture {
 public:
  static constexpr const char* kName = "redis store";
  RedisStoreFixture();
  Store& store() { return *store_; }

 private:
  std::unique_ptr<RedisServer> server_;
  std::unique_ptr<RedisStore> store_;
};

// A TCP store this process serves on a loopback port the kernel picks, with a client of its own
// (as rank 0 of a job is).
class TcpStoreFixture {
 public:
  static constexpr const char* kName = "tcp store";
  TcpStoreFixture();
  Store& store() { return *store_; }

 private:
  std::unique_ptr<TcpStore> store_;
};

// The same under TLS, with a job secret: every call on a secured link.
class SecureTcpStoreFixture {
 public:
  static constexpr const char* kName = "tcp store, TLS and job secret";
  SecureTcpStoreFixture();
  Store& store() { return *store_; }

 private:
  std::unique_ptr<TcpStore> store_;
};

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_RENDEZVOUS_STORE_FIXTURES_H_
