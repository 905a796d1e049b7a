// The job secret that proves a process belongs to the job: CHORUS_AUTH_KEY (the secret itself)
// or CHORUS_AUTH_KEY_FILE (a file holding it). Every rank and the TCP store use the same one;
// auth_exchange.h says how it is proven without being sent.
#ifndef CHORUS_CORE_SECURITY_AUTH_KEY_H_
#define CHORUS_CORE_SECURITY_AUTH_KEY_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace chorus::security {

struct AuthKey {
  std::string secret;
  // Where it came from, for messages: "CHORUS_AUTH_KEY" or "CHORUS_AUTH_KEY_FILE=/path".
  std::string source;
};

// The key the environment names, or nullopt when neither variable is set. InvalidArgument when
// both are set, the file cannot be read, or the secret is shorter than kMinSecretBytes. A key
// file that others may read is used, with a warning.
absl::StatusOr<std::optional<AuthKey>> AuthKeyFromEnv();

// A secret of 16 bytes or more: shorter ones are guessable offline from one recorded exchange.
inline constexpr size_t kMinSecretBytes = 16;

}  // namespace chorus::security

#endif  // CHORUS_CORE_SECURITY_AUTH_KEY_H_
