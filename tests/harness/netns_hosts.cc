#include "tests/harness/netns_hosts.h"

#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"

namespace chorus::testing {
namespace {

// Every `ip` command ends within this, so a wedged netlink call cannot hang the test.
constexpr int kIpTimeoutSeconds = 10;

}  // namespace

absl::StatusOr<std::unique_ptr<NetnsHosts>> NetnsHosts::Create(int hosts) {
  if (hosts < 1 || hosts > 200) {
    return absl::InvalidArgumentError(absl::StrCat("NetnsHosts: ", hosts, " hosts"));
  }
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  std::unique_ptr<NetnsHosts> created(
      new NetnsHosts(absl::StrCat("chorus-", getpid(), "-", now.tv_nsec % 1000000)));
  // On failure `created` is destroyed here, deleting what Add made so far.
  absl::Status status = created->Add(hosts);
  if (!status.ok()) return status;
  return created;
}

absl::Status NetnsHosts::Add(int hosts) {
  const std::string bridge = absl::StrCat(prefix_, "-br");
  CHORUS_RETURN_IF_ERROR(AddNamespace(bridge));
  CHORUS_RETURN_IF_ERROR(Ip(absl::StrCat("-n ", bridge, " link add br0 type bridge")));
  CHORUS_RETURN_IF_ERROR(Ip(absl::StrCat("-n ", bridge, " link set br0 up")));
  for (int host = 0; host < hosts; ++host) {
    const std::string name = absl::StrCat(prefix_, "-", host);
    CHORUS_RETURN_IF_ERROR(AddNamespace(name));
    hosts_.push_back(name);
    // Interface names only need to be unique within their namespaces, which are new.
    CHORUS_RETURN_IF_ERROR(Ip(absl::StrCat("link add h", host, " netns ", name,
                                           " type veth peer name p", host, " netns ", bridge)));
    CHORUS_RETURN_IF_ERROR(Ip(absl::StrCat("-n ", bridge, " link set p", host, " master br0 up")));
    CHORUS_RETURN_IF_ERROR(
        Ip(absl::StrCat("-n ", name, " addr add ", address(host), "/24 dev h", host)));
    CHORUS_RETURN_IF_ERROR(Ip(absl::StrCat("-n ", name, " link set h", host, " up")));
    CHORUS_RETURN_IF_ERROR(Ip(absl::StrCat("-n ", name, " link set lo up")));
  }
  return absl::OkStatus();
}

absl::Status NetnsHosts::AddNamespace(const std::string& name) {
  CHORUS_RETURN_IF_ERROR(Ip(absl::StrCat("netns add ", name)));
  created_.push_back(name);
  return absl::OkStatus();
}

NetnsHosts::~NetnsHosts() {
  for (const std::string& name : created_) (void)Ip(absl::StrCat("netns del ", name));
}

std::string NetnsHosts::address(int host) const { return absl::StrCat("10.231.0.", host + 1); }

absl::Status NetnsHosts::Enter(int host) const {
  const std::string path = absl::StrCat("/run/netns/", hosts_[host]);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  }
  const int result = setns(fd, CLONE_NEWNET);
  const int error = errno;
  close(fd);
  if (result != 0) {
    return absl::InternalError(absl::StrCat("setns ", path, ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

absl::Status NetnsHosts::Ip(const std::string& args) {
  // `timeout` bounds the command; its output (stderr too) explains a failure.
  const std::string command = absl::StrCat("timeout ", kIpTimeoutSeconds, " ip ", args, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    return absl::InternalError(absl::StrCat("popen '", command, "': ", std::strerror(errno)));
  }
  std::string output;
  char chunk[256];
  while (fgets(chunk, sizeof(chunk), pipe) != nullptr) output += chunk;
  const int status = pclose(pipe);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::UnavailableError(
        absl::StrCat("'ip ", args, "' failed (status ", status, "): ", output));
  }
  return absl::OkStatus();
}

}  // namespace chorus::testing
