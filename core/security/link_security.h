// How a process secures its TCP links (transport streams and TCP store connections): the job
// secret every link proves (auth_exchange.h), and TLS (tls.h), each optional. Read once from
// the environment; every rank and the store's server must be given the same settings.
#ifndef CHORUS_CORE_SECURITY_LINK_SECURITY_H_
#define CHORUS_CORE_SECURITY_LINK_SECURITY_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "chorus/core/security/auth_key.h"
#include "chorus/core/security/tls.h"

namespace chorus::security {

struct LinkSecurity {
  std::optional<AuthKey> auth;
  std::shared_ptr<const TlsContext> tls;

  // CHORUS_AUTH_KEY / CHORUS_AUTH_KEY_FILE and CHORUS_TLS_CERT / _KEY / _CA. InvalidArgument
  // naming the variable on anything unusable.
  static absl::StatusOr<LinkSecurity> FromEnv();

  const AuthKey* auth_key() const { return auth ? &*auth : nullptr; }
  // "plain", "job secret", "TLS", "TLS and job secret".
  std::string Describe() const;
};

}  // namespace chorus::security

#endif  // CHORUS_CORE_SECURITY_LINK_SECURITY_H_
