// The committed test certificates (testdata/, made by make_test_certificates.sh), found through
// the test's runfiles, and environments that turn link security on for one scope.
#ifndef CHORUS_TESTS_SECURITY_TEST_CERTIFICATES_H_
#define CHORUS_TESTS_SECURITY_TEST_CERTIFICATES_H_

#include <memory>
#include <string>
#include <vector>

#include "chorus/core/security/tls.h"
#include "tests/transport/scoped_env.h"

namespace chorus::testing {

// The path of testdata/<name>.
std::string TestCertificatePath(const std::string& name);

// A member of the test job: member.pem/.key under ca.pem.
security::TlsFiles MemberTlsFiles();
// A process of another job: stranger.pem/.key under other_ca.pem.
security::TlsFiles StrangerTlsFiles();

// Sets CHORUS_TLS_CERT, CHORUS_TLS_KEY and CHORUS_TLS_CA to `files` while alive.
class ScopedTlsEnv {
 public:
  explicit ScopedTlsEnv(const security::TlsFiles& files);

 private:
  std::vector<std::unique_ptr<ScopedEnv>> variables_;
};

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_SECURITY_TEST_CERTIFICATES_H_
