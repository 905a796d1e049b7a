// The verbs transport on a machine without rdma-core: libibverbs is loaded only when a verbs
// device is asked for, so everything else works, asking for verbs fails with an error that says
// what to install, and CHORUS_TRANSPORT=auto uses TCP. The library is hidden by mounting
// /dev/null over it in a private mount namespace of a child process (needs root; skipped,
// saying so, otherwise).
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "chorus/transport/device_from_env.h"
#include "chorus/transport/ibverbs/verbs_device.h"
#include "tests/harness/multirank.h"
#include "tests/transport/captured_log.h"

namespace chorus::testing {
namespace {

constexpr char kLibrary[] = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";

// Makes libibverbs unloadable for this process alone.
absl::Status HideLibrary() {
  char target[PATH_MAX];
  if (realpath(kLibrary, target) == nullptr) {
    return InternalError(absl::StrCat("realpath(", kLibrary, "): ", std::strerror(errno)));
  }
  if (unshare(CLONE_NEWNS) != 0) {
    return InternalError(absl::StrCat("unshare(CLONE_NEWNS): ", std::strerror(errno)));
  }
  // Mounts made here must not reach the parent's namespace.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      mount("/dev/null", target, nullptr, MS_BIND, nullptr) != 0) {
    return InternalError(
        absl::StrCat("mounting /dev/null over ", target, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

TEST_CASE("without libibverbs, verbs is refused saying what to install and auto uses TCP") {
  if (geteuid() != 0) {
    WARN("SKIPPED: hiding libibverbs needs a private mount namespace, which needs root");
    return;
  }
  if (access(kLibrary, R_OK) != 0) {
    WARN("SKIPPED: " << kLibrary << " is not here to hide");
    return;
  }
  const std::vector<ProcessOutcome> outcomes = RunRanksAsProcesses(
      1,
      [](int) -> absl::Status {
        CHORUS_RETURN_IF_ERROR(HideLibrary());
        const absl::StatusOr<std::unique_ptr<Device>> verbs =
            CreateDeviceByName("ibverbs", tcp::TcpDeviceOptions{});
        if (verbs.ok()) return InternalError("a verbs device opened without libibverbs");
        if (GetErrorKind(verbs.status()) != ErrorKind::kPeerUnavailable ||
            !absl::StrContains(verbs.status().message(), "cannot load libibverbs.so.1") ||
            !absl::StrContains(verbs.status().message(), "libibverbs1")) {
          return InternalError(absl::StrCat("unexpected error: ", verbs.status().ToString()));
        }
        std::string why_not;
        if (ibverbs::ActiveRdmaPortExists(&why_not) ||
            !absl::StrContains(why_not, "cannot load libibverbs.so.1")) {
          return InternalError(absl::StrCat("auto's probe says: ", why_not));
        }
        const CapturedLog log;
        const absl::StatusOr<std::unique_ptr<Device>> automatic =
            CreateDeviceByName("auto", tcp::TcpDeviceOptions{});
        if (!automatic.ok()) return automatic.status();
        const std::string logged = log.Read();
        if (!absl::StrContains(logged, "auto: ibverbs: cannot load libibverbs.so.1") ||
            !absl::StrContains(logged, "tcp to ranks on other hosts")) {
          return InternalError(absl::StrCat("auto's device is ", (*automatic)->address(),
                                            ", and it logged: ", logged));
        }
        return absl::OkStatus();
      },
      absl::Minutes(1));
  for (const ProcessOutcome& outcome : outcomes) {
    INFO(outcome.Describe());
    CHECK(outcome.ok());
  }
}

}  // namespace
}  // namespace chorus::testing
