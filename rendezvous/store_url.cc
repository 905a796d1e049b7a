#include "chorus/rendezvous/store_url.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/env.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/file_store.h"
#include "chorus/rendezvous/prefix_store.h"
#include "chorus/rendezvous/rank_env.h"

namespace chorus {
namespace {

constexpr absl::string_view kForms =
    "file:///abs/path or redis://[[user]:password@]host[:port][/prefix]";
constexpr int kDefaultRedisPort = 6379;

absl::Status UrlError(absl::string_view url, absl::string_view problem) {
  return InvalidArgumentError(absl::StrCat("store URL '", url, "': ", problem, "; use ", kForms));
}

// Decodes %XX escapes; nullopt on a malformed escape.
std::optional<std::string> PercentDecode(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    int byte = 0;
    if (i + 2 >= text.size() || !absl::ascii_isxdigit(text[i + 1]) ||
        !absl::ascii_isxdigit(text[i + 2]) || !absl::SimpleHexAtoi(text.substr(i + 1, 2), &byte)) {
      return std::nullopt;
    }
    out.push_back(static_cast<char>(byte));
    i += 2;
  }
  return out;
}

absl::StatusOr<StoreUrl> ParseFileUrl(absl::string_view url, absl::string_view rest) {
  if (!absl::StartsWith(rest, "/")) {
    return UrlError(url, "a file URL takes an absolute path and no host (three slashes)");
  }
  std::optional<std::string> path = PercentDecode(rest);
  if (!path) return UrlError(url, "malformed %-escape in the path");
  StoreUrl parsed;
  parsed.kind = StoreUrl::Kind::kFile;
  parsed.file_directory = *std::move(path);
  return parsed;
}

// "host", "host:port", "[v6]" or "[v6]:port" into `host` and `port`; `default_port` < 0
// makes the port required.
absl::Status ParseHostPort(absl::string_view url, absl::string_view authority, int default_port,
                           std::string* host, int* port) {
  absl::string_view port_text;
  if (absl::StartsWith(authority, "[")) {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) return UrlError(url, "unclosed '[' in the host");
    *host = std::string(authority.substr(1, close - 1));
    const absl::string_view after = authority.substr(close + 1);
    if (!after.empty() && !absl::StartsWith(after, ":")) {
      return UrlError(url, "expected ':port' after the bracketed host");
    }
    port_text = after.empty() ? after : after.substr(1);
    if (after == ":") return UrlError(url, "the port after ':' is empty");
  } else {
    const size_t colon = authority.find(':');
    *host = std::string(authority.substr(0, colon));
    if (colon != absl::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return UrlError(url, "the port after ':' is empty");
    }
  }
  if (host->empty()) return UrlError(url, "the host is missing");
  if (port_text.empty()) {
    if (default_port < 0) return UrlError(url, "the port is missing");
    *port = default_port;
    return absl::OkStatus();
  }
  if (!absl::SimpleAtoi(port_text, port) || *port < 1 || *port > 65535) {
    return UrlError(url, absl::StrCat("'", port_text, "' is not a port in [1, 65535]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<StoreUrl> ParseRedisUrl(absl::string_view url, absl::string_view rest) {
  if (absl::StrContains(rest, '?') || absl::StrContains(rest, '#')) {
    return UrlError(url, "query parameters and fragments are not supported");
  }
  StoreUrl parsed;
  parsed.kind = StoreUrl::Kind::kRedis;
  const size_t slash = rest.find('/');
  absl::string_view authority = rest.substr(0, slash);
  if (slash != absl::string_view::npos) {
    std::optional<std::string> prefix = PercentDecode(rest.substr(slash + 1));
    if (!prefix) return UrlError(url, "malformed %-escape in the prefix");
    parsed.prefix = *std::move(prefix);
  }
  const size_t at = authority.rfind('@');
  if (at != absl::string_view::npos) {
    const absl::string_view userinfo = authority.substr(0, at);
    authority.remove_prefix(at + 1);
    const size_t colon = userinfo.find(':');
    if (colon == absl::string_view::npos) {
      return UrlError(url, "credentials must be ':password@' or 'user:password@'");
    }
    std::optional<std::string> user = PercentDecode(userinfo.substr(0, colon));
    std::optional<std::string> password = PercentDecode(userinfo.substr(colon + 1));
    if (!user || !password) return UrlError(url, "malformed %-escape in the credentials");
    if (password->empty()) return UrlError(url, "the password after ':' is empty");
    parsed.redis.username = *std::move(user);
    parsed.redis.password = *std::move(password);
  }
  CHORUS_RETURN_IF_ERROR(
      ParseHostPort(url, authority, kDefaultRedisPort, &parsed.redis.host, &parsed.redis.port));
  return parsed;
}

absl::StatusOr<StoreUrl> ParseTcpUrl(absl::string_view url, absl::string_view rest) {
  if (absl::StrContains(rest, '/') || absl::StrContains(rest, '?') ||
      absl::StrContains(rest, '#') || absl::StrContains(rest, '@')) {
    return UrlError(url, "a tcp URL is just tcp://host:port");
  }
  StoreUrl parsed;
  parsed.kind = StoreUrl::Kind::kTcp;
  CHORUS_RETURN_IF_ERROR(ParseHostPort(url, rest, -1, &parsed.tcp.host, &parsed.tcp.port));
  return parsed;
}

}  // namespace

absl::string_view StoreKindName(StoreUrl::Kind kind) {
  switch (kind) {
    case StoreUrl::Kind::kFile:
      return "file";
    case StoreUrl::Kind::kRedis:
      return "redis";
    case StoreUrl::Kind::kTcp:
      return "tcp";
  }
  return "unknown";
}

absl::StatusOr<StoreUrl> ParseStoreUrl(absl::string_view url) {
  const size_t separator = url.find("://");
  if (separator == absl::string_view::npos) return UrlError(url, "missing scheme");
  const std::string scheme = absl::AsciiStrToLower(url.substr(0, separator));
  const absl::string_view rest = url.substr(separator + 3);
  if (scheme == "file") return ParseFileUrl(url, rest);
  if (scheme == "redis") return ParseRedisUrl(url, rest);
  if (scheme == "tcp") return ParseTcpUrl(url, rest);
  if (scheme == "memory") {
    return InvalidArgumentError(absl::StrCat(
        "store URL '", url,
        "': memory:// lives inside one process, so ranks in different "
        "processes could never meet there; for ranks that are threads of one process construct "
        "a MemoryStore directly, otherwise use ",
        kForms));
  }
  return UrlError(url, absl::StrCat("unknown scheme '", scheme, "'"));
}

namespace {

// Whether this process serves a tcp:// store: the one whose rank (rank_env.h) is 0 does. An
// error when the environment gives no rank.
absl::StatusOr<bool> ServesTcpStore() {
  absl::StatusOr<RankIdentity> identity = ReadRankIdentity();
  if (!identity.ok()) {
    return Annotate(identity.status(),
                    "a tcp:// store is served by rank 0, so each process must know its rank");
  }
  return identity->rank == 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenStore(absl::string_view url) {
  CHORUS_ASSIGN_OR_RETURN(StoreUrl parsed, ParseStoreUrl(url));
  // Opened by URL, a process that knows no rank is a client.
  if (parsed.kind == StoreUrl::Kind::kTcp) parsed.tcp.serve = ServesTcpStore().value_or(false);
  return OpenStore(parsed);
}

absl::StatusOr<std::unique_ptr<Store>> OpenStore(const StoreUrl& url) {
  if (url.kind == StoreUrl::Kind::kFile) {
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store, FileStore::Open(url.file_directory));
    return std::unique_ptr<Store>(std::move(store));
  }
  if (url.kind == StoreUrl::Kind::kTcp) {
    TcpStoreOptions options = url.tcp;
    // The links to the store are secured like the TCP transport's, by the same variables.
    CHORUS_ASSIGN_OR_RETURN(options.security, security::LinkSecurity::FromEnv());
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> store, TcpStore::Open(options));
    return std::unique_ptr<Store>(std::move(store));
  }
  RedisStoreOptions redis_options = url.redis;
  if (const std::optional<std::string> ttl = GetEnv("CHORUS_REDIS_KEY_TTL")) {
    int64_t seconds = 0;
    if (!absl::SimpleAtoi(*ttl, &seconds) || seconds < 0) {
      return InvalidArgumentError(absl::StrCat("CHORUS_REDIS_KEY_TTL='", *ttl,
                                               "' is not a whole number of seconds >= 0 (0: keys "
                                               "never expire)"));
    }
    redis_options.key_ttl = absl::Seconds(seconds);
  }
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<RedisStore> redis, RedisStore::Connect(redis_options));
  if (url.prefix.empty()) return std::unique_ptr<Store>(std::move(redis));
  return std::unique_ptr<Store>(std::make_unique<PrefixStore>(url.prefix, std::move(redis)));
}

absl::StatusOr<StoreUrl> StoreUrlFromEnvironment() {
  const std::optional<std::string> url = GetEnv("CHORUS_STORE");
  const std::optional<std::string> master_addr = GetEnv("MASTER_ADDR");
  const std::optional<std::string> master_port = GetEnv("MASTER_PORT");
  absl::StatusOr<StoreUrl> parsed;
  if (url) {
    parsed = ParseStoreUrl(*url);
    if (!parsed.ok()) return Annotate(parsed.status(), absl::StrCat("CHORUS_STORE='", *url, "'"));
  } else if (master_addr && master_port) {
    int port = 0;
    if (!absl::SimpleAtoi(*master_port, &port) || port < 1 || port > 65534) {
      return InvalidArgumentError(absl::StrCat(
          "MASTER_PORT='", *master_port,
          "' is not a port in [1, 65534] (Chorus serves its store on MASTER_PORT + 1)"));
    }
    parsed = StoreUrl{};
    parsed->kind = StoreUrl::Kind::kTcp;
    parsed->tcp.host = *master_addr;
    parsed->tcp.port = port + 1;
  } else {
    return InvalidArgumentError(absl::StrCat(
        "CHORUS_STORE is not set, nor are MASTER_ADDR and MASTER_PORT; set CHORUS_STORE to the "
        "store all ranks meet in: ",
        kForms, " (chorusrun sets it)"));
  }
  if (parsed->kind == StoreUrl::Kind::kTcp) {
    CHORUS_ASSIGN_OR_RETURN(parsed->tcp.serve, ServesTcpStore());
  }
  return parsed;
}

absl::StatusOr<std::unique_ptr<Store>> OpenStoreFromEnvironment() {
  CHORUS_ASSIGN_OR_RETURN(const StoreUrl url, StoreUrlFromEnvironment());
  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
  if (!store.ok()) return Annotate(store.status(), "CHORUS_STORE");
  return store;
}

}  // namespace chorus
