// Simulated hosts for multi-host tests on one machine: one network namespace per host, each
// with address 10.231.0.<host + 1>/24 on a veth pair whose other end is in a bridge (itself in
// a namespace of its own). A rank that enters a host's namespace reaches ranks of other hosts
// only over TCP on those addresses, and its detected host identity (which includes the network
// namespace) differs from theirs, while ranks of one namespace still share memory.
//
// Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2's `ip`; where either is missing,
// Create fails and the test should skip, saying why.
#ifndef CHORUS_TESTS_HARNESS_NETNS_HOSTS_H_
#define CHORUS_TESTS_HARNESS_NETNS_HOSTS_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace chorus::testing {

// Not thread-safe: create and destroy it on the test thread. Enter() may be called in any
// process forked meanwhile.
class NetnsHosts {
 public:
  // Creates `hosts` (1 to 200) namespaces with names unique to this process and moment. Every
  // `ip` command runs bounded in time; on failure whatever was made is deleted and the error
  // carries the command and its output.
  static absl::StatusOr<std::unique_ptr<NetnsHosts>> Create(int hosts);
  // Deletes every namespace it created; their veth pairs and the bridge go with them.
  ~NetnsHosts();
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  int size() const { return static_cast<int>(hosts_.size()); }
  // "10.231.0.<host + 1>", the host's address.
  std::string address(int host) const;
  // Moves the calling thread into host `host`'s network namespace (in a forked single-threaded
  // rank: the whole process); sockets created afterwards live there.
  absl::Status Enter(int host) const;

 private:
  explicit NetnsHosts(std::string prefix) : prefix_(std::move(prefix)) {}
  // Runs `ip <args>` with a time limit; the error carries the output.
  absl::Status Ip(const std::string& args);
  absl::Status Add(int hosts);
  // `ip netns add name`, remembered for deletion.
  absl::Status AddNamespace(const std::string& name);

  const std::string prefix_;
  std::vector<std::string> created_;  // every namespace made, deleted by the destructor
  std::vector<std::string> hosts_;    // the hosts' namespaces, by host
};

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_HARNESS_NETNS_HOSTS_H_
