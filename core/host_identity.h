// Who shares a kernel and a pid namespace with this process: the identity that decides
// whether two processes can reach each other by pid (memfds, pidfds, liveness checks); and how
// many of the host's cores this process may use, against which ranks count as oversubscribed.
#ifndef CHORUS_CORE_HOST_IDENTITY_H_
#define CHORUS_CORE_HOST_IDENTITY_H_

#include <sys/types.h>

#include <string>

#include "absl/strings/string_view.h"

namespace chorus {

// "<boot id>/<pid namespace inode>", digits only (never ':'). Processes whose identities differ
// are on different hosts or in different containers. Computed once.
const std::string& LocalHostIdentity();

// The inode number of this process's namespace `name` ("pid", "net", ...) as digits, from
// /proc/self/ns/<name>; empty when it cannot be read.
std::string NamespaceInode(absl::string_view name);

// Whether process `pid` of this host (pid namespace) is running: false once it has exited,
// also while it is a zombie its parent has not reaped.
bool ProcessRunning(pid_t pid);

// The cores this process may run on (its CPU affinity); 0 when it cannot be read, so that any
// number of ranks counts as outnumbering them.
int UsableCores();

}  // namespace chorus

#endif  // CHORUS_CORE_HOST_IDENTITY_H_
