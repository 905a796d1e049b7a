// Opening a store from a URL, the form users put in configuration and environment variables:
//
//   file:///abs/path                                  a FileStore on that (shared) directory
//   redis://[[user]:password@]host[:port][/prefix]   a RedisStore (port 6379 by default); a
//                                                     prefix wraps it in a PrefixStore
//
// User, password and prefix may be percent-encoded (%40 for '@', %2F for '/'); IPv6 hosts go in
// brackets (redis://[::1]:6379). memory:// is refused: an in-process store cannot join ranks in
// different processes.
#ifndef CHORUS_RENDEZVOUS_STORE_URL_H_
#define CHORUS_RENDEZVOUS_STORE_URL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chorus/rendezvous/redis_store.h"
#include "chorus/rendezvous/store.h"

namespace chorus {

// A parsed store URL.
struct StoreUrl {
  enum class Kind { kFile, kRedis };
  Kind kind = Kind::kFile;
  std::string file_directory;  // kFile
  RedisStoreOptions redis;     // kRedis: host, port, username, password (defaults otherwise)
  std::string prefix;          // kRedis: empty for none
};

// Parses without opening anything. kInvalidArgument naming the problem and the accepted forms.
absl::StatusOr<StoreUrl> ParseStoreUrl(absl::string_view url);

// Parses and opens (a Redis store connects and checks the server answers).
absl::StatusOr<std::unique_ptr<Store>> OpenStore(absl::string_view url);
absl::StatusOr<std::unique_ptr<Store>> OpenStore(const StoreUrl& url);

// The one reader of CHORUS_STORE: its value, parsed. kInvalidArgument naming the variable when it
// is unset or malformed.
absl::StatusOr<StoreUrl> StoreUrlFromEnvironment();

// OpenStore(StoreUrlFromEnvironment()).
absl::StatusOr<std::unique_ptr<Store>> OpenStoreFromEnvironment();

}  // namespace chorus

#endif  // CHORUS_RENDEZVOUS_STORE_URL_H_
