#include "chorus/rendezvous/redis_store.h"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <signal.h>
#include <sys/time.h>

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/store_support.h"

namespace chorus {
namespace {

// Idle connections kept for reuse; more are opened when more threads call at once.
constexpr size_t kMaxIdleConnections = 8;

// No connect or command gets less than this, so a call made with an (almost) expired deadline
// still gets one real try (a TryGet-like answer) instead of failing without asking.
constexpr absl::Duration kMinimumTry = absl::Milliseconds(10);

timeval BoundedTimeval(absl::Duration limit, const Deadline& deadline) {
  const absl::Duration bound = std::max(std::min(limit, deadline.Remaining()), kMinimumTry);
  return absl::ToTimeval(bound);
}

// hiredis writes with write(2): on a connection the server closed, that raises SIGPIPE, which
// would kill the process. This blocks SIGPIPE on the calling thread for the scope and discards
// one raised meanwhile (SIGPIPE from a write is delivered to the writing thread).
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &saved_);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~ScopedSigpipeBlock() {
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{0, 0};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t pipe_;
  sigset_t saved_;
  bool was_pending_ = false;
};

std::string Quoted(absl::string_view key) { return absl::StrCat("'", absl::CHexEscape(key), "'"); }

// Sends one command and reads its reply, both bounded by `timeout`. nullptr when the connection
// failed (context->errstr says why); the context is then unusable.
redisReply* SendCommand(redisContext* context, const std::vector<absl::string_view>& args,
                        timeval timeout) {
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  argv.reserve(args.size());
  lengths.reserve(args.size());
  for (absl::string_view arg : args) {
    argv.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  redisSetTimeout(context, timeout);
  ScopedSigpipeBlock no_sigpipe;
  return static_cast<redisReply*>(
      redisCommandArgv(context, static_cast<int>(argv.size()), argv.data(), lengths.data()));
}

}  // namespace

void RedisStore::ContextDeleter::operator()(redisContext* context) const { redisFree(context); }
void RedisStore::ReplyDeleter::operator()(redisReply* reply) const { freeReplyObject(reply); }

absl::StatusOr<std::unique_ptr<RedisStore>> RedisStore::Connect(RedisStoreOptions options) {
  if (options.host.empty() || options.port <= 0 || options.port > 65535) {
    return InvalidArgumentError(absl::StrCat("redis store: '", options.host, ":", options.port,
                                             "' is not a usable host and port"));
  }
  if (options.attempts < 1 || options.max_keys_per_command < 1) {
    return InvalidArgumentError("redis store: attempts and max_keys_per_command must be >= 1");
  }
  std::unique_ptr<RedisStore> store(new RedisStore(std::move(options)));
  CHORUS_RETURN_IF_ERROR(
      store->Run({"PING"}, Deadline::Infinite(), Resend::kSafe, "PING").status());
  return store;
}

RedisStore::RedisStore(RedisStoreOptions options)
    : options_(std::move(options)), address_(absl::StrCat(options_.host, ":", options_.port)) {}

RedisStore::~RedisStore() = default;

std::string RedisStore::Describe() const { return absl::StrCat("redis store ", address_); }

absl::StatusOr<RedisStore::ContextPtr> RedisStore::OpenConnection(Deadline deadline) const {
  ContextPtr context(redisConnectWithTimeout(options_.host.c_str(), options_.port,
                                             BoundedTimeval(options_.connect_timeout, deadline)));
  if (context == nullptr) return PeerUnavailableError("cannot allocate a hiredis context");
  if (context->err != 0) return PeerUnavailableError(absl::StrCat("connect: ", context->errstr));
  if (options_.password.empty()) return context;

  std::vector<absl::string_view> auth = {"AUTH"};
  if (!options_.username.empty()) auth.push_back(options_.username);
  auth.push_back(options_.password);
  const ReplyPtr reply(
      SendCommand(context.get(), auth, BoundedTimeval(options_.command_timeout, deadline)));
  if (reply == nullptr) return PeerUnavailableError(absl::StrCat("AUTH: ", context->errstr));
  if (reply->type == REDIS_REPLY_ERROR) {
    // Not retried: a wrong password does not become right by asking again.
    return InvalidArgumentError(absl::StrCat(
        Describe(), ": the server refused AUTH",
        options_.username.empty() ? "" : absl::StrCat(" for user '", options_.username, "'"), " (",
        reply->str, "); check the password in the store URL (redis://:PASSWORD@host:port)"));
  }
  return context;
}

RedisStore::ContextPtr RedisStore::TakeIdle() {
  std::lock_guard<std::mutex> lock(mu_);
  while (!idle_.empty()) {
    ContextPtr context = std::move(idle_.back());
    idle_.pop_back();
    // An idle connection has nothing to read; if poll says otherwise the server closed it (or
    // restarted), and sending on it would fail or, worse, leave Add's outcome unknown.
    pollfd probe{context->fd, POLLIN, 0};
    if (poll(&probe, 1, 0) == 0) return context;
  }
  return nullptr;
}

void RedisStore::ReturnIdle(ContextPtr context) {
  if (context->err != 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(context));
}

absl::Status RedisStore::ErrorReplyStatus(absl::string_view text, absl::string_view what) const {
  if (absl::StartsWith(text, "NOAUTH")) {
    return InvalidArgumentError(absl::StrCat(Describe(), ": the server requires a password (", text,
                                             "); put it in the store URL: redis://:PASSWORD@",
                                             address_));
  }
  const std::string message = absl::StrCat(Describe(), ": ", what, " failed: ", text);
  if (absl::StartsWith(text, "WRONGTYPE") || absl::StrContains(text, "not an integer")) {
    return InvalidArgumentError(message);
  }
  return PeerUnavailableError(message);
}

absl::StatusOr<RedisStore::ReplyPtr> RedisStore::Run(const std::vector<absl::string_view>& args,
                                                     Deadline deadline, Resend resend,
                                                     absl::string_view what) {
  const absl::Time start = absl::Now();
  PollBackoff backoff(options_.retry_backoff_initial, options_.retry_backoff_max);
  std::string last_error;
  int tries = 0;
  while (tries < options_.attempts) {
    if (tries > 0 && !backoff.SleepBefore(deadline)) break;
    ++tries;
    ContextPtr context = TakeIdle();
    if (context == nullptr) {
      absl::StatusOr<ContextPtr> opened = OpenConnection(deadline);
      if (!opened.ok()) {
        if (GetErrorKind(opened.status()) == ErrorKind::kInvalidArgument) return opened.status();
        last_error = std::string(opened.status().message());
        CHORUS_LOG(kDebug, "rendezvous") << Describe() << ": try " << tries << " of "
                                         << options_.attempts << " failed: " << last_error;
        continue;
      }
      context = *std::move(opened);
    }
    ReplyPtr reply(
        SendCommand(context.get(), args, BoundedTimeval(options_.command_timeout, deadline)));
    if (reply == nullptr) {
      last_error = absl::StrCat(what, ": ", context->errstr);
      if (resend == Resend::kUnsafe) {
        return PeerUnavailableError(
            absl::StrCat(Describe(), ": the connection broke during ", what, " (", context->errstr,
                         "); it may or may not have been applied, so it is not retried"));
      }
      continue;
    }
    const bool error_reply = reply->type == REDIS_REPLY_ERROR;
    ReturnIdle(std::move(context));  // an error reply leaves the connection usable
    if (error_reply) return ErrorReplyStatus(reply->str, what);
    return reply;
  }
  const std::string waited =
      absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(1)));
  if (tries < options_.attempts) {
    return DeadlineExceededError(
        absl::StrCat(Describe(), ": ", what, " did not complete before the deadline (", tries,
                     " tries over ", waited, "; last error: ", last_error,
                     "); check that redis-server is running and responsive at ", address_));
  }
  return PeerUnavailableError(absl::StrCat(
      Describe(), ": ", what, " failed: cannot reach the server after ", tries, " tries over ",
      waited, " (last error: ", last_error, "); check that redis-server is running at ", address_,
      ", reachable from this host, and that the store URL names it"));
}

absl::Status RedisStore::Set(absl::string_view key, absl::string_view value) {
  return MultiSet({KeyValue(std::string(key), std::string(value))});
}

int64_t RedisStore::TtlSeconds() const {
  if (options_.key_ttl <= absl::ZeroDuration()) return 0;
  return std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(options_.key_ttl, absl::Seconds(1))));
}

absl::StatusOr<std::string> RedisStore::Get(absl::string_view key, Deadline deadline) {
  const std::string owned(key);
  CHORUS_ASSIGN_OR_RETURN(std::vector<std::string> values,
                          MultiGet(absl::MakeConstSpan(&owned, 1), deadline));
  return std::move(values[0]);
}

absl::StatusOr<std::optional<std::string>> RedisStore::TryGet(absl::string_view key) {
  CHORUS_RETURN_IF_ERROR(ValidateKey(key, Describe()));
  CHORUS_ASSIGN_OR_RETURN(ReplyPtr reply, Run({"GET", key}, Deadline::Infinite(), Resend::kSafe,
                                              absl::StrCat("GET ", Quoted(key))));
  if (reply->type == REDIS_REPLY_NIL) return std::optional<std::string>();
  if (reply->type != REDIS_REPLY_STRING) {
    return InternalError(
        absl::StrCat(Describe(), ": GET ", Quoted(key), " returned reply type ", reply->type));
  }
  return std::optional<std::string>(std::string(reply->str, reply->len));
}

absl::StatusOr<int64_t> RedisStore::Add(absl::string_view key, int64_t delta) {
  CHORUS_RETURN_IF_ERROR(ValidateKey(key, Describe()));
  const std::string delta_text = absl::StrCat(delta);
  const std::string ttl_text = absl::StrCat(TtlSeconds());
  // INCRBY and the expiry in one script, so no crash between them leaves a key that never
  // expires.
  static constexpr absl::string_view kAddWithExpiry =
      "local v = redis.call('INCRBY', KEYS[1], ARGV[1]) "
      "if tonumber(ARGV[2]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end return v";
  CHORUS_ASSIGN_OR_RETURN(
      ReplyPtr reply, Run({"EVAL", kAddWithExpiry, "1", key, delta_text, ttl_text},
                          Deadline::Infinite(), Resend::kUnsafe, absl::StrCat("INCRBY ", Quoted(key))));
  if (reply->type != REDIS_REPLY_INTEGER) {
    return InternalError(
        absl::StrCat(Describe(), ": INCRBY ", Quoted(key), " returned reply type ", reply->type));
  }
  return static_cast<int64_t>(reply->integer);
}

absl::Status RedisStore::Delete(absl::string_view key) {
  CHORUS_RETURN_IF_ERROR(ValidateKey(key, Describe()));
  return Run({"DEL", key}, Deadline::Infinite(), Resend::kSafe, absl::StrCat("DEL ", Quoted(key)))
      .status();
}

absl::Status RedisStore::MultiSet(absl::Span<const KeyValue> pairs) {
  for (const KeyValue& pair : pairs) CHORUS_RETURN_IF_ERROR(ValidateKey(pair.first, Describe()));
  const size_t batch = static_cast<size_t>(options_.max_keys_per_command);
  for (size_t first = 0; first < pairs.size(); first += batch) {
    const size_t last = std::min(pairs.size(), first + batch);
    // MSET cannot set an expiry: a script sets each key with one, atomically like MSET.
    static constexpr absl::string_view kSetWithExpiry =
        "local ttl = tonumber(ARGV[1]) for i = 1, #KEYS do "
        "if ttl > 0 then redis.call('SET', KEYS[i], ARGV[i + 1], 'EX', ttl) "
        "else redis.call('SET', KEYS[i], ARGV[i + 1]) end end return 1";
    const std::string ttl_text = absl::StrCat(TtlSeconds());
    const std::string count = absl::StrCat(last - first);
    std::vector<absl::string_view> args = {"EVAL", kSetWithExpiry, count};
    for (size_t i = first; i < last; ++i) args.push_back(pairs[i].first);
    args.push_back(ttl_text);
    for (size_t i = first; i < last; ++i) args.push_back(pairs[i].second);
    const std::string what = last - first == 1
                                 ? absl::StrCat("SET ", Quoted(pairs[first].first))
                                 : absl::StrCat("MSET of ", last - first, " keys");
    CHORUS_RETURN_IF_ERROR(Run(args, Deadline::Infinite(), Resend::kSafe, what).status());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RedisStore::MultiGet(absl::Span<const std::string> keys,
                                                              Deadline deadline) {
  for (const std::string& key : keys) CHORUS_RETURN_IF_ERROR(ValidateKey(key, Describe()));
  const absl::Time start = absl::Now();
  const size_t batch = static_cast<size_t>(options_.max_keys_per_command);
  std::vector<std::optional<std::string>> found(keys.size());
  PollBackoff backoff(options_.poll_initial, options_.poll_max);
  auto missing_keys = [&keys, &found] {
    std::vector<std::string> missing;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!found[i].has_value()) missing.push_back(keys[i]);
    }
    return missing;
  };
  for (bool first_poll = true;; first_poll = false) {
    std::vector<size_t> missing;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!found[i].has_value()) missing.push_back(i);
    }
    if (missing.empty()) break;
    if (!first_poll && !backoff.SleepBefore(deadline)) {
      return DeadlineExceededError(absl::StrCat(
          Describe(), ": keys [", DescribeKeys(missing_keys()), "] were not set within ",
          absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(1))),
          "; check that every rank started and uses the same store and prefix"));
    }
    for (size_t first = 0; first < missing.size(); first += batch) {
      const size_t last = std::min(missing.size(), first + batch);
      std::vector<absl::string_view> args = {"MGET"};
      for (size_t j = first; j < last; ++j) args.push_back(keys[missing[j]]);
      absl::StatusOr<ReplyPtr> reply =
          Run(args, deadline, Resend::kSafe, absl::StrCat("MGET of ", last - first, " keys"));
      if (!reply.ok()) {
        return Annotate(reply.status(),
                        absl::StrCat("waiting for keys [", DescribeKeys(missing_keys()), "]"));
      }
      if ((*reply)->type != REDIS_REPLY_ARRAY || (*reply)->elements != last - first) {
        return InternalError(absl::StrCat(Describe(), ": MGET returned an unexpected reply"));
      }
      for (size_t j = first; j < last; ++j) {
        const redisReply* element = (*reply)->element[j - first];
        if (element->type == REDIS_REPLY_STRING) {
          found[missing[j]] = std::string(element->str, element->len);
        }
      }
    }
  }
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (std::optional<std::string>& value : found) values.push_back(*std::move(value));
  return values;
}

}  // namespace chorus
