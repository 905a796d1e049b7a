#include "tests/security/test_certificates.h"

#include <cstdlib>

namespace chorus::testing {

std::string TestCertificatePath(const std::string& name) {
  const char* runfiles = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  const std::string root = runfiles != nullptr ? runfiles : ".";
  return root + "/" + (workspace != nullptr ? workspace : "chorus") + "/tests/security/testdata/" +
         name;
}

security::TlsFiles MemberTlsFiles() {
  return {TestCertificatePath("member.pem"), TestCertificatePath("member.key"),
          TestCertificatePath("ca.pem")};
}

security::TlsFiles StrangerTlsFiles() {
  return {TestCertificatePath("stranger.pem"), TestCertificatePath("stranger.key"),
          TestCertificatePath("other_ca.pem")};
}

ScopedTlsEnv::ScopedTlsEnv(const security::TlsFiles& files) {
  variables_.push_back(std::make_unique<ScopedEnv>("CHORUS_TLS_CERT", files.certificate.c_str()));
  variables_.push_back(std::make_unique<ScopedEnv>("CHORUS_TLS_KEY", files.private_key.c_str()));
  variables_.push_back(std::make_unique<ScopedEnv>("CHORUS_TLS_CA", files.ca.c_str()));
}

}  // namespace chorus::testing
