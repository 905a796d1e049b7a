// Opening a store from a URL, the form users put in configuration and environment variables:
//
//   file:///abs/path                                  a FileStore on that (shared) directory
//   redis://[[user]:password@]host[:port][/prefix]   a RedisStore (port 6379 by default); a
//                                                     prefix wraps it in a PrefixStore
//   tcp://host:port                                   a TcpStore: served by one process of the
//                                                     job, on host:port (tcp_store.h)
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
#include "chorus/rendezvous/tcp_store.h"

namespace chorus {

// A parsed store URL.
struct StoreUrl {
  enum class Kind { kFile, kRedis, kTcp };
  Kind kind = Kind::kFile;
  std::string file_directory;  // kFile
  RedisStoreOptions redis;     // kRedis: host, port, username, password (defaults otherwise)
  std::string prefix;          // kRedis: empty for none
  TcpStoreOptions tcp;         // kTcp: host and port; `serve` only as the environment says
};

// "file", "redis" or "tcp".
absl::string_view StoreKindName(StoreUrl::Kind kind);

// Parses without opening anything. kInvalidArgument naming the problem and the accepted forms.
absl::StatusOr<StoreUrl> ParseStoreUrl(absl::string_view url);

// Parses and opens (a Redis store connects and checks the server answers). A tcp:// store is
// served by the process whose rank (rank_env.h) is 0; every other process, and any process
// without a rank in its environment, connects to it.
absl::StatusOr<std::unique_ptr<Store>> OpenStore(absl::string_view url);
absl::StatusOr<std::unique_ptr<Store>> OpenStore(const StoreUrl& url);

// The one reader of the store's environment:
//   CHORUS_STORE                  the URL, parsed;
//   else MASTER_ADDR, MASTER_PORT tcp://MASTER_ADDR:<MASTER_PORT + 1> (torchrun and most Slurm
//                                 recipes set them; MASTER_PORT itself is left to PyTorch's own
//                                 store, which torchrun and torch.distributed serve there).
// For a tcp:// store, the process whose rank (rank_env.h) is 0 serves it.
// kInvalidArgument naming the variable when none is set or a value is malformed.
absl::StatusOr<StoreUrl> StoreUrlFromEnvironment();

// OpenStore(StoreUrlFromEnvironment()).
absl::StatusOr<std::unique_ptr<Store>> OpenStoreFromEnvironment();

}  // namespace chorus

#endif  // CHORUS_RENDEZVOUS_STORE_URL_H_
