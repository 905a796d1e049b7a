#include "chorus/rendezvous/store_url.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/env.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/file_store.h"
#include "chorus/rendezvous/prefix_store.h"

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
  absl::string_view port_text;
  if (absl::StartsWith(authority, "[")) {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) return UrlError(url, "unclosed '[' in the host");
    parsed.redis.host = std::string(authority.substr(1, close - 1));
    const absl::string_view after = authority.substr(close + 1);
    if (!after.empty() && !absl::StartsWith(after, ":")) {
      return UrlError(url, "expected ':port' after the bracketed host");
    }
    port_text = after.empty() ? after : after.substr(1);
    if (after == ":") return UrlError(url, "the port after ':' is empty");
  } else {
    const size_t colon = authority.find(':');
    parsed.redis.host = std::string(authority.substr(0, colon));
    if (colon != absl::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return UrlError(url, "the port after ':' is empty");
    }
  }
  if (parsed.redis.host.empty()) return UrlError(url, "the host is missing");
  parsed.redis.port = kDefaultRedisPort;
  if (!port_text.empty() && (!absl::SimpleAtoi(port_text, &parsed.redis.port) ||
                             parsed.redis.port < 1 || parsed.redis.port > 65535)) {
    return UrlError(url, absl::StrCat("'", port_text, "' is not a port in [1, 65535]"));
  }
  return parsed;
}

}  // namespace

absl::StatusOr<StoreUrl> ParseStoreUrl(absl::string_view url) {
  const size_t separator = url.find("://");
  if (separator == absl::string_view::npos) return UrlError(url, "missing scheme");
  const std::string scheme = absl::AsciiStrToLower(url.substr(0, separator));
  const absl::string_view rest = url.substr(separator + 3);
  if (scheme == "file") return ParseFileUrl(url, rest);
  if (scheme == "redis") return ParseRedisUrl(url, rest);
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

absl::StatusOr<std::unique_ptr<Store>> OpenStore(absl::string_view url) {
  CHORUS_ASSIGN_OR_RETURN(const StoreUrl parsed, ParseStoreUrl(url));
  return OpenStore(parsed);
}

absl::StatusOr<std::unique_ptr<Store>> OpenStore(const StoreUrl& url) {
  if (url.kind == StoreUrl::Kind::kFile) {
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store, FileStore::Open(url.file_directory));
    return std::unique_ptr<Store>(std::move(store));
  }
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<RedisStore> redis, RedisStore::Connect(url.redis));
  if (url.prefix.empty()) return std::unique_ptr<Store>(std::move(redis));
  return std::unique_ptr<Store>(std::make_unique<PrefixStore>(url.prefix, std::move(redis)));
}

absl::StatusOr<StoreUrl> StoreUrlFromEnvironment() {
  const std::optional<std::string> url = GetEnv("CHORUS_STORE");
  if (!url) {
    return InvalidArgumentError(absl::StrCat(
        "CHORUS_STORE is not set; set it to the store all ranks meet in: ", kForms,
        " (chorusrun sets it)"));
  }
  absl::StatusOr<StoreUrl> parsed = ParseStoreUrl(*url);
  if (!parsed.ok()) return Annotate(parsed.status(), absl::StrCat("CHORUS_STORE='", *url, "'"));
  return parsed;
}

absl::StatusOr<std::unique_ptr<Store>> OpenStoreFromEnvironment() {
  CHORUS_ASSIGN_OR_RETURN(const StoreUrl url, StoreUrlFromEnvironment());
  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
  if (!store.ok()) return Annotate(store.status(), "CHORUS_STORE");
  return store;
}

}  // namespace chorus
