#include "chorus/rendezvous/tcp_store.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/store_support.h"

namespace chorus {
namespace {

using security::IoResult;
using tcp_store::Op;
using tcp_store::Outcome;
using tcp_store::Reply;
using tcp_store::Request;

// Connections kept open for later calls; more are opened while many threads call at once.
constexpr size_t kMaxIdleConnections = 4;
// Dial retries while the server is not up yet.
constexpr absl::Duration kFirstRetry = absl::Milliseconds(10);
constexpr absl::Duration kMaxRetry = absl::Milliseconds(500);

uint32_t TimeoutMillis(Deadline deadline) {
  if (deadline.IsInfinite()) return tcp_store::kNoTimeoutMs;
  const int64_t ms = absl::ToInt64Milliseconds(deadline.Remaining() + absl::Microseconds(999));
  return static_cast<uint32_t>(std::min<int64_t>(ms, tcp_store::kNoTimeoutMs - 1));
}

absl::StatusOr<SocketAddress> Resolve(const std::string& host, int port) {
  if (port < 1 || port > 65535) {
    return InvalidArgumentError(absl::StrCat("tcp store: port ", port, " is not in [1, 65535]"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int error = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (error != 0 || found == nullptr) {
    return InvalidArgumentError(absl::StrCat("tcp store: cannot resolve host '", host,
                                             "': ", gai_strerror(error)));
  }
  SocketAddress address = SocketAddress::FromSockaddr(found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  address.set_port(static_cast<uint16_t>(port));
  return address;
}

// Waits until `fd` is ready for `events` or `deadline`; false on timeout.
bool AwaitReady(int fd, short events, Deadline deadline) {
  while (true) {
    pollfd entry{fd, events, 0};
    const int ready = poll(&entry, 1, deadline.RemainingMillis(1000));
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) return true;  // let the read or write report it
    if (deadline.Expired()) return false;
  }
}

// Waits for the socket event a blocked `result` needs; false on timeout.
bool AwaitChannel(const security::Channel& channel, const IoResult& result, Deadline deadline) {
  return AwaitReady(channel.fd(), result.kind == IoResult::Kind::kWantWrite ? POLLOUT : POLLIN,
                    deadline);
}

}  // namespace

TcpStore::TcpStore(SocketAddress server_address, const TcpStoreOptions& options,
                   std::unique_ptr<tcp_store::TcpStoreServer> server)
    : server_address_(std::move(server_address)),
      security_(options.security),
      reply_timeout_(options.reply_timeout),
      server_(std::move(server)) {}

TcpStore::~TcpStore() = default;

absl::StatusOr<std::unique_ptr<TcpStore>> TcpStore::Open(const TcpStoreOptions& options) {
  CHORUS_ASSIGN_OR_RETURN(SocketAddress address, Resolve(options.host, options.port));
  std::unique_ptr<tcp_store::TcpStoreServer> server;
  if (options.serve) {
    // On every address of this host: `host` is how the others reach it, which need not be an
    // address this host can bind (a name that resolves to a loopback alias here, a NAT).
    CHORUS_ASSIGN_OR_RETURN(
        SocketAddress any,
        SocketAddress::FromIp(address.family() == AF_INET6 ? "::" : "0.0.0.0", address.port()));
    CHORUS_ASSIGN_OR_RETURN(server, tcp_store::TcpStoreServer::Start(any, options.security));
  }
  std::unique_ptr<TcpStore> store(new TcpStore(address, options, std::move(server)));
  // The first connection, retried while the server is starting elsewhere.
  const Deadline deadline = Deadline::After(options.connect_timeout);
  absl::Duration backoff = kFirstRetry;
  bool refused = false;
  absl::StatusOr<security::Channel> connection = store->Connect(deadline, &refused);
  while (!connection.ok() && !refused && !deadline.Expired()) {
    absl::SleepFor(std::min(backoff, deadline.Remaining()));
    backoff = std::min(2 * backoff, kMaxRetry);
    connection = store->Connect(deadline, &refused);
  }
  if (refused) return connection.status();
  if (!connection.ok()) {
    return PeerUnavailableError(absl::StrCat(
        store->Describe(), " did not accept a connection within ",
        absl::FormatDuration(options.connect_timeout), " (", connection.status().message(),
        "); is the process that serves it (rank 0, on MASTER_ADDR) running, and the port open?"));
  }
  store->idle_.push_back(*std::move(connection));
  return store;
}

std::string TcpStore::Describe() const {
  return absl::StrCat("tcp store ", server_address_.ToString());
}

absl::Status TcpStore::ServerGone(absl::string_view what) const {
  return PeerUnavailableError(absl::StrCat(
      Describe(), ": ", what,
      "; the process serving the store (rank 0, or the one given its address) may have exited "
      "or be unreachable"));
}

absl::StatusOr<security::Channel> TcpStore::Connect(Deadline deadline, bool* refused) const {
  *refused = false;
  CHORUS_ASSIGN_OR_RETURN(ScopedFd fd, StartConnect(server_address_, 0));
  if (!AwaitReady(fd.get(), POLLOUT, deadline)) {
    return DeadlineExceededError(absl::StrCat("connecting to ", Describe(), " timed out"));
  }
  if (const int error = TakeSocketError(fd.get()); error != 0) {
    return PeerUnavailableError(absl::StrCat("connecting to ", Describe(), ": ", ErrnoText(error)));
  }
  CHORUS_ASSIGN_OR_RETURN(security::Channel channel,
                          security::Channel::Open(std::move(fd), security_.tls.get(),
                                                  security::TlsContext::Role::kClient));
  security::AuthExchange auth(security::AuthExchange::Role::kDialer, security_.auth_key(),
                              security::kStoreLinkLabel);
  while (true) {
    const char* what = nullptr;
    const IoResult step = security::DriveSecuring(channel, auth, &what);
    if (step.done()) break;
    if (step.blocked()) {
      if (!AwaitChannel(channel, step, deadline)) {
        return DeadlineExceededError(
            absl::StrCat("securing the connection to ", Describe(), " timed out (", what, ")"));
      }
      continue;
    }
    // A system call that failed may pass (the server restarting); a TLS refusal will not.
    *refused = step.kind == IoResult::Kind::kError && step.error_number == 0;
    return PeerUnavailableError(absl::StrCat(
        Describe(), ": ",
        step.kind == IoResult::Kind::kClosed
            ? absl::StrCat(what, ": the server closed the connection")
            : step.error,
        *refused ? " (docs/security.md)" : ""));
  }
  if (!auth.result().ok()) {
    *refused = true;
    return PeerUnavailableError(absl::StrCat(Describe(), " refused the link: ",
                                             auth.result().message()));
  }
  return channel;
}

absl::StatusOr<Reply> TcpStore::Call(Request request, Deadline deadline) {
  request.timeout_ms = TimeoutMillis(deadline);
  const Deadline reply_deadline =
      deadline.IsInfinite() ? deadline : Deadline::After(deadline.Remaining() + reply_timeout_);
  security::Channel channel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      channel = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!channel.valid()) {
    bool refused = false;
    absl::StatusOr<security::Channel> connected = Connect(Deadline::After(reply_timeout_), &refused);
    if (!connected.ok()) {
      return refused ? connected.status() : ServerGone(connected.status().message());
    }
    channel = *std::move(connected);
  }

  const std::string frame = tcp_store::EncodeRequest(request);
  for (size_t sent = 0; sent < frame.size();) {
    const IoResult written = channel.Write(frame.data() + sent, frame.size() - sent);
    if (written.done()) {
      sent += written.bytes;
    } else if (!written.blocked()) {
      return ServerGone(absl::StrCat("sending a request: ", written.error));
    } else if (!AwaitChannel(channel, written, reply_deadline)) {
      return DeadlineExceededError(absl::StrCat(Describe(), " did not take a request in time"));
    }
  }

  std::string in;
  size_t needed = tcp_store::kFrameHeaderBytes;
  bool have_length = false;
  while (in.size() < needed) {
    char buffer[64 << 10];
    const IoResult got = channel.Read(buffer, sizeof(buffer));
    if (got.blocked()) {
      if (!AwaitChannel(channel, got, reply_deadline)) {
        // The connection is dropped: its answer, if it ever comes, belongs to no call.
        return DeadlineExceededError(absl::StrCat(Describe(), " did not answer within ",
                                                  absl::FormatDuration(reply_timeout_),
                                                  " of the deadline"));
      }
      continue;
    }
    if (got.kind == IoResult::Kind::kClosed) return ServerGone("the server closed the connection");
    if (!got.done()) return ServerGone(absl::StrCat("reading a reply: ", got.error));
    in.append(buffer, got.bytes);
    if (!have_length && in.size() >= tcp_store::kFrameHeaderBytes) {
      CHORUS_ASSIGN_OR_RETURN(const uint32_t length, tcp_store::DecodeFrameLength(in));
      needed = tcp_store::kFrameHeaderBytes + length;
      have_length = true;
    }
  }
  absl::StatusOr<Reply> reply = tcp_store::DecodeReply(
      absl::string_view(in).substr(tcp_store::kFrameHeaderBytes, needed - tcp_store::kFrameHeaderBytes));
  if (!reply.ok()) return ServerGone(reply.status().message());
  if (in.size() == needed) {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(channel));
  }
  if (reply->outcome == Outcome::kError) {
    return InvalidArgumentError(absl::StrCat(Describe(), " refused a request: ",
                                             reply->strings.empty() ? "" : reply->strings[0]));
  }
  return reply;
}

absl::Status TcpStore::Set(absl::string_view key, absl::string_view value) {
  return MultiSet({KeyValue(std::string(key), std::string(value))});
}

absl::StatusOr<std::string> TcpStore::Get(absl::string_view key, Deadline deadline) {
  CHORUS_ASSIGN_OR_RETURN(std::vector<std::string> values,
                          MultiGet({std::string(key)}, deadline));
  return std::move(values[0]);
}

absl::StatusOr<std::optional<std::string>> TcpStore::TryGet(absl::string_view key) {
  CHORUS_RETURN_IF_ERROR(ValidateKey(key, Describe()));
  Request request;
  request.op = Op::kTryGet;
  request.strings.emplace_back(key);
  CHORUS_ASSIGN_OR_RETURN(Reply reply, Call(std::move(request), Deadline::After(absl::ZeroDuration())));
  if (reply.outcome == Outcome::kAbsent) return std::optional<std::string>();
  if (reply.strings.size() != 1) return ServerGone("a malformed try-get reply");
  return std::optional<std::string>(std::move(reply.strings[0]));
}

absl::StatusOr<int64_t> TcpStore::Add(absl::string_view key, int64_t delta) {
  CHORUS_RETURN_IF_ERROR(ValidateKey(key, Describe()));
  Request request;
  request.op = Op::kAdd;
  request.delta = delta;
  request.strings.emplace_back(key);
  CHORUS_ASSIGN_OR_RETURN(Reply reply, Call(std::move(request), Deadline::After(absl::ZeroDuration())));
  return reply.number;
}

absl::Status TcpStore::Delete(absl::string_view key) {
  CHORUS_RETURN_IF_ERROR(ValidateKey(key, Describe()));
  Request request;
  request.op = Op::kDelete;
  request.strings.emplace_back(key);
  return Call(std::move(request), Deadline::After(absl::ZeroDuration())).status();
}

absl::Status TcpStore::MultiSet(absl::Span<const KeyValue> pairs) {
  Request request;
  request.op = Op::kMultiSet;
  for (const auto& [key, value] : pairs) {
    CHORUS_RETURN_IF_ERROR(ValidateKey(key, Describe()));
    request.strings.push_back(key);
    request.strings.push_back(value);
  }
  return Call(std::move(request), Deadline::After(absl::ZeroDuration())).status();
}

absl::StatusOr<std::vector<std::string>> TcpStore::MultiGet(absl::Span<const std::string> keys,
                                                            Deadline deadline) {
  Request request;
  request.op = Op::kMultiGet;
  for (const std::string& key : keys) {
    CHORUS_RETURN_IF_ERROR(ValidateKey(key, Describe()));
    request.strings.push_back(key);
  }
  CHORUS_ASSIGN_OR_RETURN(Reply reply, Call(std::move(request), deadline));
  if (reply.outcome == Outcome::kTimedOut) {
    return DeadlineExceededError(absl::StrCat("waiting in ", Describe(), " timed out; still missing: ",
                                              DescribeKeys(reply.strings)));
  }
  if (reply.strings.size() != keys.size()) return ServerGone("a malformed get reply");
  return std::move(reply.strings);
}

}  // namespace chorus
