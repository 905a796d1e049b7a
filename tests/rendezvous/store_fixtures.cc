#include "tests/rendezvous/store_fixtures.h"

#include <cstdio>
#include <cstdlib>

namespace chorus::testing {

FileStoreFixture::FileStoreFixture() {
  auto opened = FileStore::Open(dir_.path() + "/store");
  if (!opened.ok()) {
    std::fprintf(stderr, "FATAL: %s\n", opened.status().ToString().c_str());
    std::abort();
  }
  store_ = *std::move(opened);
}

PrefixStoreFixture::PrefixStoreFixture()
    : store_(std::make_unique<PrefixStore>("communicator-7", inner_.store())) {}

}  // namespace chorus::testing
