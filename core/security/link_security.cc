#include "chorus/core/security/link_security.h"

#include "chorus/core/status.h"

namespace chorus::security {

absl::StatusOr<LinkSecurity> LinkSecurity::FromEnv() {
  LinkSecurity security;
  CHORUS_ASSIGN_OR_RETURN(security.auth, AuthKeyFromEnv());
  CHORUS_ASSIGN_OR_RETURN(std::optional<TlsFiles> files, TlsFilesFromEnv());
  if (files) {
    CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<TlsContext> tls, TlsContext::Create(*files));
    security.tls = std::move(tls);
  }
  return security;
}

std::string LinkSecurity::Describe() const {
  if (tls && auth) return "TLS and job secret";
  if (tls) return "TLS";
  if (auth) return "job secret";
  return "plain";
}

}  // namespace chorus::security
