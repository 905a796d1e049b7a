// A store served over TCP by one process of the job (tcp_store_server.h), so a job spanning
// hosts needs neither a Redis server nor a shared directory: the URL tcp://host:port, or
// torchrun's MASTER_ADDR and MASTER_PORT (store_url.h). The serving process keeps the keys in
// memory; they live as long as it does.
//
// Each call runs on a connection of its own from a small pool, so a thread waiting for a key
// never holds up another thread's call. Waits are parked on the server, which answers as soon as
// the keys are set (no polling). If the server goes away, every call in flight fails at once
// with kPeerUnavailable naming the store.
#ifndef CHORUS_RENDEZVOUS_TCP_STORE_H_
#define CHORUS_RENDEZVOUS_TCP_STORE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chorus/core/security/channel.h"
#include "chorus/core/security/link_security.h"
#include "chorus/core/socket.h"
#include "chorus/rendezvous/store.h"
#include "chorus/rendezvous/tcp_store_protocol.h"
#include "chorus/rendezvous/tcp_store_server.h"

namespace chorus {

struct TcpStoreOptions {
  std::string host;  // a name or a numeric address
  int port = 0;
  // This process serves the store (on `port` of every address of its host), and is a client of
  // its own server like every other process.
  bool serve = false;
  // How long to keep trying to reach the server at first: the process serving it may start
  // later than the others.
  absl::Duration connect_timeout = absl::Seconds(60);
  // How much longer than the wait it asks for (none for a set, an add or a delete) a call waits
  // for the server's answer, and how long a call that finds no idle connection may take to open
  // one. A server that stops answering without closing its connections is noticed after this;
  // one that is only busy (thousands of ranks connecting at once to one serving thread) must
  // answer within it. A wait with no deadline waits for the server as long as it takes.
  absl::Duration reply_timeout = absl::Seconds(30);
  // TLS and the job secret, for the server and every connection to it (docs/security.md); the
  // store URL's opener reads them from the environment like the TCP transport does.
  security::LinkSecurity security;
};

class TcpStore : public Store {
 public:
  // Starts the server when `options.serve`, then connects (retrying until the connect
  // timeout). kPeerUnavailable naming host:port when the server cannot be reached;
  // kInvalidArgument when the host does not resolve or the port is out of range; kPeerUnavailable
  // at once, naming the reason, when the server refuses this process's secret or certificate
  // or fails to prove its own.
  static absl::StatusOr<std::unique_ptr<TcpStore>> Open(const TcpStoreOptions& options);
  // Stops the server if this process serves it.
  ~TcpStore() override;

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
  TcpStore(SocketAddress server_address, const TcpStoreOptions& options,
           std::unique_ptr<tcp_store::TcpStoreServer> server);

  // Sends `request` and returns the server's reply. `deadline` bounds a wait the request asks
  // for (the server answers kTimedOut by then); the call itself gives up `reply_timeout_` later
  // only if the server stops answering.
  absl::StatusOr<tcp_store::Reply> Call(tcp_store::Request request, Deadline deadline);
  // A connection to the server, secured as `security_` says. When it fails, `*refused` says
  // whether the server (or this process) refused the link: retrying cannot help then.
  absl::StatusOr<security::Channel> Connect(Deadline deadline, bool* refused) const;
  absl::Status ServerGone(absl::string_view what) const;

  const SocketAddress server_address_;
  const security::LinkSecurity security_;
  const absl::Duration reply_timeout_;
  // Set when this process serves the store. Declared before the pool, so the pool's
  // connections close before the server stops.
  std::unique_ptr<tcp_store::TcpStoreServer> server_;
  std::mutex mu_;
  std::vector<security::Channel> idle_;  // guarded by mu_: connections with no call in flight
};

}  // namespace chorus

#endif  // CHORUS_RENDEZVOUS_TCP_STORE_H_
