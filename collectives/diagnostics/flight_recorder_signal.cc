#include "chorus/collectives/diagnostics/flight_recorder_signal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"

namespace chorus {
namespace {

// The byte that tells the watcher to stop; signal numbers are never 0.
constexpr char kStopByte = 0;

// The pipe's write end, read by the handler: an atomic because the handler may run on any
// thread. Set once, before the first handler is installed, and never closed.
std::atomic<int> pipe_write_fd{-1};

void OnSignal(int signal) {
  const int saved_errno = errno;
  const char byte = static_cast<char>(signal);
  // Non-blocking: with the pipe full, dumps are already pending and this one is redundant.
  const ssize_t ignored = write(pipe_write_fd.load(std::memory_order_relaxed), &byte, 1);
  (void)ignored;
  errno = saved_errno;
}

struct Registry {
  std::mutex lifecycle_mu;  // orders registrations, handler installation and watcher start/stop
  int read_fd ABSL_GUARDED_BY(lifecycle_mu) = -1;
  std::set<int> installed ABSL_GUARDED_BY(lifecycle_mu);
  std::thread watcher ABSL_GUARDED_BY(lifecycle_mu);

  std::mutex mu;  // held by the watcher while it dumps, so no recorder goes away meanwhile
  std::set<const FlightRecorder*> recorders ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* registry = new Registry;  // never destroyed: a handler may still fire
  return *registry;
}

// Blocks in read(2) without a deadline on purpose: it is a service thread, woken by every
// signal and stopped by kStopByte from the last registration's destructor.
void Watch(Registry& registry, int read_fd) {
  while (true) {
    char byte = kStopByte;
    const ssize_t n = read(read_fd, &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || byte == kStopByte) return;
    const std::string reason = absl::StrCat("signal ", static_cast<int>(byte), " received");
    std::lock_guard<std::mutex> lock(registry.mu);
    for (const FlightRecorder* recorder : registry.recorders) recorder->Report(reason);
  }
}

absl::Status OpenPipe(Registry& registry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry.lifecycle_mu) {
  if (registry.read_fd >= 0) return absl::OkStatus();
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0 || fcntl(fds[1], F_SETFL, O_NONBLOCK) != 0) {
    return InternalError(absl::StrCat("flight recorder signal pipe: ", strerror(errno)));
  }
  registry.read_fd = fds[0];
  pipe_write_fd.store(fds[1]);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> ParseDumpSignal(absl::string_view text) {
  std::string name = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(text));
  if (name.empty() || name == "OFF" || name == "0") return 0;
  if (absl::StartsWith(name, "SIG")) name = name.substr(3);
  int number = 0;
  if (name == "USR1") {
    number = SIGUSR1;
  } else if (name == "USR2") {
    number = SIGUSR2;
  } else if (!absl::SimpleAtoi(name, &number)) {
    number = -1;
  }
  if (number <= 0 || number >= NSIG || number == SIGKILL || number == SIGSTOP) {
    return InvalidArgumentError(absl::StrCat(
        "CHORUS_FLIGHT_RECORDER_SIGNAL='", text,
        "' is not SIGUSR1, SIGUSR2, off, or the number of a signal that can be caught"));
  }
  return number;
}

absl::StatusOr<std::unique_ptr<SignalDumpRegistration>> SignalDumpRegistration::Create(
    const FlightRecorder& recorder, int signal) {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lifecycle(registry.lifecycle_mu);
  CHORUS_RETURN_IF_ERROR(OpenPipe(registry));
  if (registry.installed.count(signal) == 0) {
    struct sigaction action = {};
    action.sa_handler = OnSignal;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    if (sigaction(signal, &action, nullptr) != 0) {
      return InternalError(absl::StrCat("installing the flight recorder's handler for signal ",
                                        signal, ": ", strerror(errno)));
    }
    registry.installed.insert(signal);
  }
  {
    std::lock_guard<std::mutex> lock(registry.mu);
    registry.recorders.insert(&recorder);
  }
  if (!registry.watcher.joinable()) {
    registry.watcher = std::thread(Watch, std::ref(registry), registry.read_fd);
  }
  return std::unique_ptr<SignalDumpRegistration>(new SignalDumpRegistration(recorder));
}

SignalDumpRegistration::~SignalDumpRegistration() {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lifecycle(registry.lifecycle_mu);
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(registry.mu);
    registry.recorders.erase(&recorder_);
    last = registry.recorders.empty();
  }
  if (!last || !registry.watcher.joinable()) return;
  // The write end is non-blocking; a full pipe means the watcher is busy reading it.
  while (write(pipe_write_fd.load(), &kStopByte, 1) != 1) std::this_thread::yield();
  registry.watcher.join();
}

}  // namespace chorus
