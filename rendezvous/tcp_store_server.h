// The server side of the TCP store (tcp_store.h): one thread with epoll holds the keys in memory
// and answers every connected client, so a job needs no service besides its own rank 0 (or
// whichever process starts it). Waits (Get, MultiGet) are parked on the server, not polled: a
// client's request sleeps until the keys it needs are set or its timeout runs out, and each
// connection's requests are answered in order.
#ifndef CHORUS_RENDEZVOUS_TCP_STORE_SERVER_H_
#define CHORUS_RENDEZVOUS_TCP_STORE_SERVER_H_

#include <atomic>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "chorus/core/security/link_security.h"
#include "chorus/core/socket.h"

namespace chorus::tcp_store {

class ServerLoop;

// Thread-safe: created and destroyed by one thread; the serving happens on its own.
class TcpStoreServer {
 public:
  // Listens on `address` (port 0: the kernel picks one; see address()) and starts serving
  // clients that pass `security` (TLS and the job secret, each if set); others are refused and
  // logged with their address. Raises this process's open-file limit to its hard limit, so
  // thousands of clients fit.
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(
      SocketAddress address, security::LinkSecurity security = {});

  // Stops serving and closes every connection: clients' pending calls fail at once with
  // kPeerUnavailable naming the store.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // Where it listens, with the port it got.
  const SocketAddress& address() const { return address_; }

 private:
  TcpStoreServer(SocketAddress address, std::unique_ptr<ServerLoop> loop);

  const SocketAddress address_;
  std::unique_ptr<ServerLoop> loop_;
  std::thread thread_;
};

}  // namespace chorus::tcp_store

#endif  // CHORUS_RENDEZVOUS_TCP_STORE_SERVER_H_
