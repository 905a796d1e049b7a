#include "tests/harness/redis_server.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace chorus::testing {
namespace {

// A port picked free can be taken by someone else before redis binds it; try a few.
constexpr int kPortAttempts = 3;

}  // namespace

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::Start(RedisServerOptions options) {
  if (access(options.binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(options.binary,
                     " is not installed or not executable; these tests need a real Redis "
                     "server: apt-get install redis-server"));
  }
  absl::Status last;
  for (int attempt = 0; attempt < kPortAttempts; ++attempt) {
    const int port = options.port != 0 ? options.port : PickFreeLoopbackPort();
    std::unique_ptr<RedisServer> server(new RedisServer(options, port));
    last = server->Launch();
    if (last.ok()) last = server->AwaitPing();
    if (last.ok()) return server;
    if (options.port != 0 || !absl::StrContains(last.message(), "Address already in use")) break;
  }
  return last;
}

RedisServer::RedisServer(RedisServerOptions options, int port)
    : options_(std::move(options)), port_(port) {}

RedisServer::~RedisServer() { Stop(); }

std::string RedisServer::url() const {
  return absl::StrCat("redis://", options_.password.empty() ? "" : ":" + options_.password + "@",
                      host_, ":", port_);
}

absl::Status RedisServer::Launch() {
  // Everything the child needs is prepared before fork: after it only exec-safe calls.
  // clang-format off
  std::vector<std::string> args = {
      options_.binary,
      "--port", absl::StrCat(port_),
      "--bind", host_,
      "--save", "",           // no snapshots
      "--appendonly", "no",   // no journal
      "--daemonize", "no",    // stay our child, so we can stop and reap it
      "--dir", dir_.path(),
      "--logfile", "",        // log to stdout, which goes to redis.log
  };
  // clang-format on
  if (!options_.password.empty()) {
    args.push_back("--requirepass");
    args.push_back(options_.password);
  }
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const std::string log_path = dir_.path() + "/redis.log";
  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return absl::InternalError(absl::StrCat("cannot create ", log_path));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return absl::InternalError("fork failed while starting redis-server");
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(log_fd);
  pid_ = pid;
  return absl::OkStatus();
}

absl::Status RedisServer::AwaitPing() {
  const absl::Time give_up = absl::Now() + options_.startup_timeout;
  while (absl::Now() < give_up) {
    int wait_status = 0;
    if (waitpid(pid_, &wait_status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::FailedPreconditionError(absl::StrCat(
          "redis-server on port ", port_, " exited at startup; its log:\n", LogTail()));
    }
    redisContext* context = redisConnectWithTimeout(host_.c_str(), port_, {0, 200 * 1000});
    if (context != nullptr && context->err == 0) {
      redisSetTimeout(context, {1, 0});
      auto* reply = static_cast<redisReply*>(redisCommand(context, "PING"));
      // With --requirepass an unauthenticated PING is answered with NOAUTH: up all the same.
      const bool up =
          reply != nullptr &&
          (reply->type == REDIS_REPLY_STATUS ||
           (reply->type == REDIS_REPLY_ERROR && absl::StartsWith(reply->str, "NOAUTH")));
      if (reply != nullptr) freeReplyObject(reply);
      redisFree(context);
      if (up) return absl::OkStatus();
    } else if (context != nullptr) {
      redisFree(context);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  const std::string log = LogTail();
  Stop();
  return absl::DeadlineExceededError(
      absl::StrCat("redis-server on port ", port_, " did not answer PING within ",
                   absl::FormatDuration(options_.startup_timeout), "; its log:\n", log));
}

void RedisServer::Stop(absl::Duration grace) {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  const absl::Time give_up = absl::Now() + grace;
  while (absl::Now() < give_up) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::string RedisServer::LogTail() const {
  std::ifstream log(dir_.path() + "/redis.log");
  std::stringstream text;
  text << log.rdbuf();
  std::string all = text.str();
  constexpr size_t kTail = 2000;
  return all.size() > kTail ? all.substr(all.size() - kTail) : all;
}

}  // namespace chorus::testing
