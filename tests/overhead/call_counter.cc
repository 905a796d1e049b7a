#include "tests/overhead/call_counter.h"

#include <dlfcn.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <new>

#include "absl/strings/str_cat.h"
#include "chorus/core/socket.h"
#include "chorus/core/status.h"

namespace {

// Constant-initialised and trivially destructible, so reading them needs no TLS wrapper and is
// safe from operator new at any point of a thread's life.
thread_local int64_t allocations_on_thread = 0;
thread_local int64_t locks_on_thread = 0;

using MutexFunction = int (*)(pthread_mutex_t*);

// The C library's functions, found before main() (and so before any thread): dlsym takes the
// loader's own locks, never the interposed ones.
MutexFunction real_lock = nullptr;
MutexFunction real_trylock = nullptr;

__attribute__((constructor)) void FindRealMutexFunctions() {
  real_lock = reinterpret_cast<MutexFunction>(dlsym(RTLD_NEXT, "pthread_mutex_lock"));
  real_trylock = reinterpret_cast<MutexFunction>(dlsym(RTLD_NEXT, "pthread_mutex_trylock"));
  if (real_lock == nullptr || real_trylock == nullptr) std::abort();
}

void* CountedAllocation(size_t bytes) {
  ++allocations_on_thread;
  if (void* memory = std::malloc(bytes == 0 ? 1 : bytes)) return memory;
  throw std::bad_alloc();
}

void* CountedAlignedAllocation(size_t bytes, std::align_val_t alignment) {
  ++allocations_on_thread;
  const size_t align = std::max(static_cast<size_t>(alignment), sizeof(void*));
  void* memory = nullptr;
  if (posix_memalign(&memory, align, bytes == 0 ? 1 : bytes) == 0) return memory;
  throw std::bad_alloc();
}

}  // namespace

// --- Interposed for the whole binary ---

extern "C" int pthread_mutex_lock(pthread_mutex_t* mutex) {
  ++locks_on_thread;
  return real_lock(mutex);
}

extern "C" int pthread_mutex_trylock(pthread_mutex_t* mutex) {
  ++locks_on_thread;
  return real_trylock(mutex);
}

void* operator new(size_t bytes) { return CountedAllocation(bytes); }
void* operator new[](size_t bytes) { return CountedAllocation(bytes); }
void* operator new(size_t bytes, const std::nothrow_t&) noexcept {
  ++allocations_on_thread;
  return std::malloc(bytes == 0 ? 1 : bytes);
}
void* operator new[](size_t bytes, const std::nothrow_t&) noexcept {
  ++allocations_on_thread;
  return std::malloc(bytes == 0 ? 1 : bytes);
}
void* operator new(size_t bytes, std::align_val_t alignment) {
  return CountedAlignedAllocation(bytes, alignment);
}
void* operator new[](size_t bytes, std::align_val_t alignment) {
  return CountedAlignedAllocation(bytes, alignment);
}
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete[](void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, size_t) noexcept { std::free(memory); }
void operator delete[](void* memory, size_t) noexcept { std::free(memory); }
void operator delete(void* memory, std::align_val_t) noexcept { std::free(memory); }
void operator delete[](void* memory, std::align_val_t) noexcept { std::free(memory); }
void operator delete(void* memory, size_t, std::align_val_t) noexcept { std::free(memory); }
void operator delete[](void* memory, size_t, std::align_val_t) noexcept { std::free(memory); }

namespace chorus::testing {
namespace {

constexpr const char* kTracefs = "/sys/kernel/tracing";
constexpr const char* kSysEnterId = "/sys/kernel/tracing/events/raw_syscalls/sys_enter/id";

// The tracepoint's id, mounting tracefs where it is not mounted yet (as root).
absl::StatusOr<uint64_t> SysEnterTracepointId() {
  std::ifstream id_file(kSysEnterId);
  if (!id_file && mount("nodev", kTracefs, "tracefs", 0, nullptr) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no ", kSysEnterId, " and tracefs cannot be mounted: ", ErrnoText(errno)));
  }
  if (!id_file) id_file.open(kSysEnterId);
  uint64_t id = 0;
  if (!(id_file >> id)) {
    return absl::FailedPreconditionError(absl::StrCat("cannot read ", kSysEnterId));
  }
  return id;
}

}  // namespace

std::string CallCounts::ToString() const {
  return absl::StrCat(allocations, " allocations, ", lock_acquisitions, " lock acquisitions, ",
                      syscalls, " system calls");
}

absl::StatusOr<CallCounter> CallCounter::ForThisThread() {
  CHORUS_ASSIGN_OR_RETURN(const uint64_t id, SysEnterTracepointId());
  perf_event_attr attr{};
  attr.type = PERF_TYPE_TRACEPOINT;
  attr.size = sizeof(attr);
  attr.config = id;
  const long fd = syscall(SYS_perf_event_open, &attr, /*this thread*/ 0, /*any cpu*/ -1,
                          /*no group*/ -1, PERF_FLAG_FD_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("perf_event_open(raw_syscalls:sys_enter): ", ErrnoText(errno)));
  }
  CallCounter counter(static_cast<int>(fd));
  // The counter's own reads: the least an empty Start/Stop pair counts.
  int64_t own = INT64_MAX;
  for (int i = 0; i < 8; ++i) {
    counter.Start();
    own = std::min(own, counter.Stop().syscalls);
  }
  counter.own_syscalls_ = own;
  return counter;
}

CallCounter::~CallCounter() {
  if (perf_fd_ >= 0) close(perf_fd_);
}

CallCounter::CallCounter(CallCounter&& other) noexcept
    : perf_fd_(other.perf_fd_), own_syscalls_(other.own_syscalls_), at_start_(other.at_start_) {
  other.perf_fd_ = -1;
}

int64_t CallCounter::ReadSyscalls() const {
  uint64_t value = 0;
  // A failed read would make every difference meaningless (and small enough to pass a
  // budget), so it ends the test instead.
  if (read(perf_fd_, &value, sizeof(value)) != sizeof(value)) {
    std::perror("reading the system-call counter");
    std::abort();
  }
  return static_cast<int64_t>(value);
}

void CallCounter::Start() {
  at_start_.allocations = allocations_on_thread;
  at_start_.lock_acquisitions = locks_on_thread;
  at_start_.syscalls = ReadSyscalls();
}

CallCounts CallCounter::Stop() {
  CallCounts counts;
  counts.syscalls = ReadSyscalls() - at_start_.syscalls - own_syscalls_;
  counts.allocations = allocations_on_thread - at_start_.allocations;
  counts.lock_acquisitions = locks_on_thread - at_start_.lock_acquisitions;
  return counts;
}

}  // namespace chorus::testing
