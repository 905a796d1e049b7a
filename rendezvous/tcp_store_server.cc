#include "chorus/rendezvous/tcp_store_server.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/logging.h"
#include "chorus/core/security/auth_exchange.h"
#include "chorus/core/security/channel.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/tcp_store_protocol.h"

namespace chorus::tcp_store {

using Clock = std::chrono::steady_clock;
using security::IoResult;

// The serving thread's state. Everything but Stop() runs on that thread.
class ServerLoop {
 public:
  ServerLoop(ScopedFd listener, ScopedFd epoll, ScopedFd stop_event,
             security::LinkSecurity security)
      : listener_(std::move(listener)),
        epoll_(std::move(epoll)),
        stop_(std::move(stop_event)),
        security_(std::move(security)) {}

  void Run();
  void Stop() {
    const uint64_t one = 1;
    while (write(stop_.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
    }
  }

 private:
  // A request that waits on the server for keys to be set.
  struct Parked {
    Request request;
    Clock::time_point deadline;
  };
  struct Client {
    security::Channel channel;
    std::string remote;  // the client's address, for the log
    // The TLS handshake and the job secret's challenge-response; null once both are done.
    std::unique_ptr<security::AuthExchange> auth;
    std::string in;   // received bytes that do not make a whole request yet
    std::string out;  // reply bytes the socket has not taken yet
    uint32_t watched = 0;
    // Under TLS a read may wait for the socket to be writable.
    bool read_wants_write = false;
    std::optional<Parked> parked;
  };

  void Accept();
  void OnEvents(Client& client, uint32_t events);
  // Advances the securing of a new connection; closes it when refused.
  void Secure(Client& client);
  void OnReadable(Client& client);
  void WatchFor(Client& client, uint32_t events);
  // A secured client's events: readable always, writable while it has output or a TLS read
  // waits to write.
  void WatchWhatItNeeds(Client& client);
  // Handles the whole requests in `client.in`, in order, until one parks; false if the client
  // was closed.
  bool ProcessInput(Client& client);
  // Answers `request` now, or parks it (returns false).
  bool Handle(Client& client, Request request);
  // The values of `keys` if all are set; else records the missing ones and returns nullopt.
  std::optional<std::vector<std::string>> Lookup(const std::vector<std::string>& keys,
                                                 std::vector<std::string>* missing) const;
  void Park(Client& client, Request request, std::vector<std::string> missing);
  void Unpark(Client& client);
  // Answers the parked requests that `key` (just set) may complete.
  void WakeWaiters(const std::string& key);
  void ExpireParked();
  void Send(Client& client, const Reply& reply);
  void Flush(Client& client);
  void Close(int fd);
  int NextTimeoutMillis() const;

  ScopedFd listener_;
  ScopedFd epoll_;
  ScopedFd stop_;
  const security::LinkSecurity security_;
  absl::flat_hash_map<int, std::unique_ptr<Client>> clients_;
  absl::flat_hash_map<std::string, std::string> data_;
  absl::flat_hash_map<std::string, absl::flat_hash_set<int>> waiting_on_;  // key -> client fds
  std::set<std::pair<Clock::time_point, int>> deadlines_;  // of parked requests, by client fd
};

namespace {

constexpr size_t kReadChunk = 64 << 10;

void RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

Reply ErrorReply(std::string message) {
  Reply reply;
  reply.outcome = Outcome::kError;
  reply.strings.push_back(std::move(message));
  return reply;
}

bool Watch(int epoll, int fd, uint32_t events, bool add) {
  epoll_event event{};
  event.events = events;
  event.data.fd = fd;
  return epoll_ctl(epoll, add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &event) == 0;
}

}  // namespace

void ServerLoop::Run() {
  std::vector<epoll_event> events(256);
  while (true) {
    const int ready = epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()),
                                 NextTimeoutMillis());
    if (ready < 0 && errno != EINTR) {
      CHORUS_LOG(kError, "store") << "tcp store server: " << ErrnoText(errno) << "; stopping";
      break;
    }
    bool stopping = false;
    for (int i = 0; i < ready; ++i) {
      const int fd = events[i].data.fd;
      if (fd == stop_.get()) {
        stopping = true;
      } else if (fd == listener_.get()) {
        Accept();
      } else if (auto it = clients_.find(fd); it != clients_.end()) {
        OnEvents(*it->second, events[i].events);
      }
    }
    if (stopping) break;
    ExpireParked();
  }
  std::vector<int> open;
  for (const auto& [fd, client] : clients_) open.push_back(fd);
  for (int fd : open) Close(fd);
}

int ServerLoop::NextTimeoutMillis() const {
  if (deadlines_.empty()) return -1;
  const auto left = deadlines_.begin()->first - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
}

void ServerLoop::Accept() {
  while (true) {
    const int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        CHORUS_LOG(kWarn, "store") << "tcp store server: " << ErrnoText(errno);
      }
      return;
    }
    ConfigureStreamSocket(fd, 0).IgnoreError();  // TCP_NODELAY: replies are small
    const std::string remote = RemoteAddressString(fd);
    absl::StatusOr<security::Channel> channel = security::Channel::Open(
        ScopedFd(fd), security_.tls.get(), security::TlsContext::Role::kServer);
    if (!channel.ok()) {
      CHORUS_LOG(kWarn, "store") << "tcp store server: refused connection from " << remote << ": "
                                 << channel.status().message();
      continue;
    }
    auto client = std::make_unique<Client>();
    client->channel = *std::move(channel);
    client->remote = remote;
    client->auth = std::make_unique<security::AuthExchange>(
        security::AuthExchange::Role::kAcceptor, security_.auth_key(), security::kStoreLinkLabel);
    if (!Watch(epoll_.get(), fd, EPOLLIN, /*add=*/true)) continue;  // closed with the channel
    client->watched = EPOLLIN;
    Client& added = *(clients_[fd] = std::move(client));
    Secure(added);
  }
}

void ServerLoop::OnEvents(Client& client, uint32_t events) {
  const int fd = client.channel.fd();
  if (client.auth != nullptr) {
    Secure(client);
    return;
  }
  if (events & (EPOLLERR | EPOLLHUP)) {
    Close(fd);
    return;
  }
  if (events & EPOLLOUT) Flush(client);
  if (clients_.contains(fd) &&
      ((events & EPOLLIN) || (client.read_wants_write && (events & EPOLLOUT)))) {
    OnReadable(client);
  }
}

void ServerLoop::WatchFor(Client& client, uint32_t events) {
  if (events == client.watched) return;
  client.watched = events;
  Watch(epoll_.get(), client.channel.fd(), events, /*add=*/false);
}

void ServerLoop::WatchWhatItNeeds(Client& client) {
  const bool writable = !client.out.empty() || client.read_wants_write;
  WatchFor(client, writable ? uint32_t{EPOLLIN | EPOLLOUT} : uint32_t{EPOLLIN});
}

void ServerLoop::Secure(Client& client) {
  const int fd = client.channel.fd();
  const char* what = nullptr;
  const IoResult step = security::DriveSecuring(client.channel, *client.auth, &what);
  if (step.blocked()) {
    WatchFor(client, step.kind == IoResult::Kind::kWantWrite ? EPOLLOUT : EPOLLIN);
    return;
  }
  if (!step.done() || !client.auth->result().ok()) {
    CHORUS_LOG(kWarn, "store") << "tcp store server: refused connection from " << client.remote
                               << ": "
                               << (step.done() ? std::string(client.auth->result().message())
                                   : step.kind == IoResult::Kind::kClosed
                                       ? absl::StrCat(what, ": the peer closed the connection")
                                       : step.error);
    client.channel.DiscardInput();
    Close(fd);
    return;
  }
  client.auth.reset();
  WatchWhatItNeeds(client);
  // Requests may have come right behind the handshake, some already inside the TLS session.
  OnReadable(client);
}

void ServerLoop::OnReadable(Client& client) {
  const int fd = client.channel.fd();
  char buffer[kReadChunk];
  while (true) {
    const IoResult got = client.channel.Read(buffer, sizeof(buffer));
    if (got.done()) {
      client.in.append(buffer, got.bytes);
      continue;
    }
    if (got.blocked()) {
      const bool wants_write = got.kind == IoResult::Kind::kWantWrite;
      if (wants_write != client.read_wants_write) {
        client.read_wants_write = wants_write;
        WatchWhatItNeeds(client);
      }
      break;
    }
    Close(fd);  // the client went away (EOF or reset)
    return;
  }
  ProcessInput(client);
}

bool ServerLoop::ProcessInput(Client& client) {
  while (!client.parked.has_value() && client.in.size() >= kFrameHeaderBytes) {
    const int fd = client.channel.fd();
    const absl::StatusOr<uint32_t> length = DecodeFrameLength(client.in);
    if (length.ok() && client.in.size() < kFrameHeaderBytes + *length) return true;  // more to come
    absl::StatusOr<Request> request =
        length.ok() ? DecodeRequest(absl::string_view(client.in).substr(kFrameHeaderBytes, *length))
                    : absl::StatusOr<Request>(length.status());
    if (length.ok()) client.in.erase(0, kFrameHeaderBytes + *length);
    if (!request.ok()) {
      // The stream cannot be trusted past a malformed frame: answer why, then hang up.
      CHORUS_LOG(kWarn, "store") << "tcp store server: closing the connection from "
                                 << RemoteAddressString(fd) << ": " << request.status().message();
      Send(client, ErrorReply(std::string(request.status().message())));
      Close(fd);
      return false;
    }
    if (!Handle(client, *std::move(request))) return true;  // parked
    if (!clients_.contains(fd)) return false;
  }
  return true;
}

std::optional<std::vector<std::string>> ServerLoop::Lookup(
    const std::vector<std::string>& keys, std::vector<std::string>* missing) const {
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const std::string& key : keys) {
    auto it = data_.find(key);
    if (it == data_.end()) {
      missing->push_back(key);
    } else if (missing->empty()) {
      values.push_back(it->second);
    }
  }
  if (!missing->empty()) return std::nullopt;
  return values;
}

bool ServerLoop::Handle(Client& client, Request request) {
  Reply reply;
  auto& s = request.strings;
  const bool one_key = s.size() == 1;
  switch (request.op) {
    case Op::kPing:
      break;
    case Op::kSet:
    case Op::kMultiSet:
      if (s.size() % 2 != 0 || (request.op == Op::kSet && s.size() != 2)) {
        reply = ErrorReply("a set needs key and value pairs");
        break;
      }
      for (size_t i = 0; i < s.size(); i += 2) data_[s[i]] = s[i + 1];
      Send(client, reply);
      for (size_t i = 0; i < s.size(); i += 2) WakeWaiters(s[i]);
      return true;
    case Op::kTryGet: {
      if (!one_key) {
        reply = ErrorReply("a try-get names one key");
        break;
      }
      auto it = data_.find(s[0]);
      if (it == data_.end()) {
        reply.outcome = Outcome::kAbsent;
      } else {
        reply.strings.push_back(it->second);
      }
      break;
    }
    case Op::kAdd: {
      if (!one_key) {
        reply = ErrorReply("an add names one key");
        break;
      }
      int64_t value = 0;
      auto it = data_.find(s[0]);
      if (it != data_.end() && !absl::SimpleAtoi(it->second, &value)) {
        reply = ErrorReply(absl::StrCat("the value under '", absl::CEscape(s[0]),
                                        "' is not an integer, so it cannot be added to"));
        break;
      }
      value += request.delta;
      data_[s[0]] = absl::StrCat(value);
      reply.number = value;
      Send(client, reply);
      WakeWaiters(s[0]);
      return true;
    }
    case Op::kDelete:
      if (!one_key) {
        reply = ErrorReply("a delete names one key");
        break;
      }
      data_.erase(s[0]);
      break;
    case Op::kGet:
    case Op::kMultiGet: {
      if (request.op == Op::kGet && !one_key) {
        reply = ErrorReply("a get names one key");
        break;
      }
      std::vector<std::string> missing;
      std::optional<std::vector<std::string>> values = Lookup(s, &missing);
      if (values.has_value()) {
        reply.strings = *std::move(values);
        break;
      }
      if (request.timeout_ms == 0) {
        reply.outcome = Outcome::kTimedOut;
        reply.strings = std::move(missing);
        break;
      }
      Park(client, std::move(request), std::move(missing));
      return false;
    }
  }
  Send(client, reply);
  return true;
}

void ServerLoop::Park(Client& client, Request request, std::vector<std::string> missing) {
  const int fd = client.channel.fd();
  const Clock::time_point deadline =
      request.timeout_ms == kNoTimeoutMs
          ? Clock::time_point::max()
          : Clock::now() + std::chrono::milliseconds(request.timeout_ms);
  for (const std::string& key : missing) waiting_on_[key].insert(fd);
  if (deadline != Clock::time_point::max()) deadlines_.emplace(deadline, fd);
  client.parked = Parked{std::move(request), deadline};
}

void ServerLoop::Unpark(Client& client) {
  const int fd = client.channel.fd();
  for (const std::string& key : client.parked->request.strings) {
    auto it = waiting_on_.find(key);
    if (it == waiting_on_.end()) continue;
    it->second.erase(fd);
    if (it->second.empty()) waiting_on_.erase(it);
  }
  deadlines_.erase({client.parked->deadline, fd});
  client.parked.reset();
}

void ServerLoop::WakeWaiters(const std::string& key) {
  auto it = waiting_on_.find(key);
  if (it == waiting_on_.end()) return;
  const std::vector<int> waiting(it->second.begin(), it->second.end());
  for (int fd : waiting) {
    auto client_it = clients_.find(fd);
    if (client_it == clients_.end()) continue;
    Client& client = *client_it->second;
    std::vector<std::string> missing;
    std::optional<std::vector<std::string>> values =
        Lookup(client.parked->request.strings, &missing);
    if (!values.has_value()) continue;  // another key it waits for is still missing
    Unpark(client);
    Reply reply;
    reply.strings = *std::move(values);
    Send(client, reply);
    if (clients_.contains(fd)) ProcessInput(client);
  }
}

void ServerLoop::ExpireParked() {
  const Clock::time_point now = Clock::now();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const int fd = deadlines_.begin()->second;
    Client& client = *clients_.at(fd);
    Reply reply;
    reply.outcome = Outcome::kTimedOut;
    Lookup(client.parked->request.strings, &reply.strings);
    Unpark(client);
    Send(client, reply);
    if (clients_.contains(fd)) ProcessInput(client);
  }
}

void ServerLoop::Send(Client& client, const Reply& reply) {
  client.out.append(EncodeReply(reply));
  Flush(client);
}

void ServerLoop::Flush(Client& client) {
  const int fd = client.channel.fd();
  while (!client.out.empty()) {
    const IoResult sent = client.channel.Write(client.out.data(), client.out.size());
    if (sent.done()) {
      client.out.erase(0, sent.bytes);
      continue;
    }
    // A TLS write that waits to read is retried on the next event either way.
    if (sent.blocked()) break;
    Close(fd);
    return;
  }
  WatchWhatItNeeds(client);
}

void ServerLoop::Close(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  if (it->second->parked.has_value()) Unpark(*it->second);
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  clients_.erase(it);  // closes the socket
}

TcpStoreServer::TcpStoreServer(SocketAddress address, std::unique_ptr<ServerLoop> loop)
    : address_(std::move(address)), loop_(std::move(loop)) {
  thread_ = std::thread([this] { loop_->Run(); });
}

TcpStoreServer::~TcpStoreServer() {
  loop_->Stop();
  thread_.join();
}

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(
    SocketAddress address, security::LinkSecurity security) {
  RaiseOpenFileLimit();
  absl::StatusOr<ScopedFd> listener = Listen(address, 0);
  if (!listener.ok()) {
    return Annotate(listener.status(),
                    absl::StrCat("tcp store: cannot serve on ", address.ToString(),
                                 " (is another job or store using that port?)"));
  }
  ScopedFd epoll(epoll_create1(EPOLL_CLOEXEC));
  ScopedFd stop(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!epoll.valid() || !stop.valid() || !Watch(epoll.get(), listener->get(), EPOLLIN, true) ||
      !Watch(epoll.get(), stop.get(), EPOLLIN, true)) {
    return InternalError(absl::StrCat("tcp store: setting up the server: ", ErrnoText(errno)));
  }
  CHORUS_LOG(kInfo, "store") << "tcp store serving on " << address.ToString() << " ("
                             << security.Describe() << ")";
  auto loop = std::make_unique<ServerLoop>(*std::move(listener), std::move(epoll), std::move(stop),
                                           std::move(security));
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(address, std::move(loop)));
}

}  // namespace chorus::tcp_store
