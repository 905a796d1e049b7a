// An environment variable set for one scope: the destructor puts back the value it had (or
// unsets it), so a test that fails part way leaves the next test the environment it expects.
#ifndef CHORUS_TESTS_TRANSPORT_SCOPED_ENV_H_
#define CHORUS_TESTS_TRANSPORT_SCOPED_ENV_H_

#include <cstdlib>
#include <optional>
#include <string>

namespace chorus::testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    setenv(name, value, 1);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    if (saved_.has_value()) {
      setenv(name_.c_str(), saved_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  const std::string name_;
  std::optional<std::string> saved_;
};

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_TRANSPORT_SCOPED_ENV_H_
