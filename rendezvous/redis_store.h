// A store on a real Redis server (hiredis): SET / GET / MGET / MSET / INCRBY / DEL. The usual
// choice across hosts: one `redis-server` reachable by every rank.
#ifndef CHORUS_RENDEZVOUS_REDIS_STORE_H_
#define CHORUS_RENDEZVOUS_REDIS_STORE_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chorus/rendezvous/store.h"

struct redisContext;
struct redisReply;

namespace chorus {

struct RedisStoreOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  // Sent with AUTH after connecting when non-empty; `username` only for Redis 6+ ACL users.
  std::string username;
  std::string password;
  // Bound on one TCP connect, and on one command's send + reply. A call with a deadline bounds
  // both by the time it has left, so no call outlives its deadline by more than ~10 ms.
  absl::Duration connect_timeout = absl::Seconds(2);
  absl::Duration command_timeout = absl::Seconds(10);
  // A call that finds the server unreachable tries this many times in all, sleeping between
  // tries from `retry_backoff_initial` doubling to `retry_backoff_max`, then fails with
  // kPeerUnavailable.
  int attempts = 5;
  absl::Duration retry_backoff_initial = absl::Milliseconds(50);
  absl::Duration retry_backoff_max = absl::Seconds(1);
  // Waits poll with MGET, starting at `poll_initial` between polls, doubling to `poll_max`.
  absl::Duration poll_initial = absl::Microseconds(200);
  absl::Duration poll_max = absl::Milliseconds(10);
  // Keys per MGET / MSET command; bigger batches are split.
  int max_keys_per_command = 1024;
  // Every key written (Set, MultiSet, Add) expires this long after its last write, so a job that
  // dies without cleaning up leaves nothing behind for longer (CHORUS_REDIS_KEY_TTL, seconds).
  // Zero: keys never expire. Communicators delete their keys when destroyed normally; the
  // expiry is the net under crashed jobs, long enough that no live communicator misses a key.
  absl::Duration key_ttl = absl::Hours(24);
};

// Thread-safe. Each call borrows a connection from a small pool for its duration, so threads
// never queue behind one another's I/O (a slow call cannot make another miss its deadline).
// Idempotent commands (all but Add) are retried on a fresh connection when one breaks; Add is
// retried only when it certainly was not sent, and otherwise reports that the increment may or
// may not have been applied.
class RedisStore : public Store {
 public:
  // Connects (with the bounded retries above) and checks the server answers, so a wrong
  // address or password surfaces here. kPeerUnavailable when unreachable, kInvalidArgument
  // when AUTH is refused or required.
  static absl::StatusOr<std::unique_ptr<RedisStore>> Connect(RedisStoreOptions options);
  ~RedisStore() override;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, Deadline deadline) override;
  absl::StatusOr<std::optional<std::string>> TryGet(absl::string_view key) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::Status Delete(absl::string_view key) override;
  absl::Status MultiSet(absl::Span<const KeyValue> pairs) override;
  absl::StatusOr<std::vector<std::string>> MultiGet(absl::Span<const std::string> keys,
                                                    Deadline deadline) override;
  std::string Describe() const override;

 private:
  struct ContextDeleter {
    void operator()(redisContext* context) const;
  };
  struct ReplyDeleter {
    void operator()(redisReply* reply) const;
  };
  using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;
  using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

  // Whether a command may be sent again after a connection broke mid-command.
  enum class Resend { kSafe, kUnsafe };

  explicit RedisStore(RedisStoreOptions options);

  // Runs one command, retrying on a fresh connection as described above. Returns the reply
  // (never an error reply: those become statuses naming `what`).
  // options_.key_ttl in whole seconds, 0 for none.
  int64_t TtlSeconds() const;
  absl::StatusOr<ReplyPtr> Run(const std::vector<absl::string_view>& args, Deadline deadline,
                               Resend resend, absl::string_view what);
  // The status for an error reply `text` to command `what`.
  absl::Status ErrorReplyStatus(absl::string_view text, absl::string_view what) const;
  // One connect + AUTH attempt bounded by `deadline`.
  absl::StatusOr<ContextPtr> OpenConnection(Deadline deadline) const;
  // An idle pooled connection that still looks alive, or nullptr.
  ContextPtr TakeIdle();
  void ReturnIdle(ContextPtr context);

  const RedisStoreOptions options_;
  const std::string address_;  // "host:port" for messages

  // std::mutex, not absl::Mutex: the system Abseil is not built for ThreadSanitizer.
  std::mutex mu_;
  std::vector<ContextPtr> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace chorus

#endif  // CHORUS_RENDEZVOUS_REDIS_STORE_H_
