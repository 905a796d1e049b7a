#include "chorus/core/security/auth_key.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "chorus/core/env.h"
#include "chorus/core/logging.h"
#include "chorus/core/socket.h"
#include "chorus/core/status.h"

namespace chorus::security {

absl::StatusOr<std::optional<AuthKey>> AuthKeyFromEnv() {
  const std::optional<std::string> inline_secret = GetEnv("CHORUS_AUTH_KEY");
  const std::optional<std::string> path = GetEnv("CHORUS_AUTH_KEY_FILE");
  if (inline_secret && path) {
    return InvalidArgumentError(
        "both CHORUS_AUTH_KEY and CHORUS_AUTH_KEY_FILE are set; set one of them");
  }
  AuthKey key;
  if (inline_secret) {
    key = {*inline_secret, "CHORUS_AUTH_KEY"};
  } else if (path) {
    std::ifstream file(*path, std::ios::binary);
    if (!file) {
      return InvalidArgumentError(absl::StrCat("CHORUS_AUTH_KEY_FILE=", *path,
                                               " cannot be read: ", ErrnoText(errno)));
    }
    std::ostringstream contents;
    contents << file.rdbuf();
    // A trailing newline from `echo secret > file` is not part of the secret.
    key = {std::string(absl::StripTrailingAsciiWhitespace(contents.str())),
           absl::StrCat("CHORUS_AUTH_KEY_FILE=", *path)};
    struct stat info {};
    if (stat(path->c_str(), &info) == 0 && (info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
      CHORUS_LOG(kWarn, "security") << key.source << " may be read by other users (mode "
                                    << absl::StrFormat("%03o", info.st_mode & 0777)
                                    << "); chmod 600 it";
    }
  } else {
    return std::optional<AuthKey>();
  }
  if (key.secret.size() < kMinSecretBytes) {
    return InvalidArgumentError(absl::StrCat(key.source, " holds a secret of ", key.secret.size(),
                                             " bytes; use at least ", kMinSecretBytes,
                                             " (e.g. `openssl rand -hex 32`)"));
  }
  return std::optional<AuthKey>(std::move(key));
}

}  // namespace chorus::security
