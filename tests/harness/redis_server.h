// A real redis-server for tests: started on 127.0.0.1 and a free port, without persistence,
// and always stopped (and reaped) when the object goes away.
#ifndef CHORUS_TESTS_HARNESS_REDIS_SERVER_H_
#define CHORUS_TESTS_HARNESS_REDIS_SERVER_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/harness/multirank.h"

namespace chorus::testing {

struct RedisServerOptions {
  std::string binary = "/usr/bin/redis-server";
  int port = 0;          // 0: pick a free one
  std::string password;  // --requirepass when non-empty
  absl::Duration startup_timeout = absl::Seconds(15);
};

// Not thread-safe: start and stop from one test thread. The server is forked from the calling
// thread and dies with it (PR_SET_PDEATHSIG), so it never outlives the test.
class RedisServer {
 public:
  // Starts the server and waits until it answers PING. A clear error when redis-server is not
  // installed (install the Debian package redis-server), fails to start, or does not answer in
  // time; the error quotes the server's log.
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start(RedisServerOptions options = {});
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  // redis://[:password@]127.0.0.1:port
  std::string url() const;

  // SIGTERM, then SIGKILL if it has not exited within `grace`; always reaped. Idempotent.
  void Stop(absl::Duration grace = absl::Seconds(5));

 private:
  RedisServer(RedisServerOptions options, int port);
  absl::Status Launch();
  absl::Status AwaitPing();
  std::string LogTail() const;

  const RedisServerOptions options_;
  const std::string host_ = "127.0.0.1";
  const int port_;
  TempDir dir_;  // working directory and log
  pid_t pid_ = -1;
};

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_HARNESS_REDIS_SERVER_H_
