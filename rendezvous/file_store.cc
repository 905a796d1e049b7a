#include "chorus/rendezvous/file_store.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/store_support.h"

namespace chorus {
namespace {

// Escaped keys are cut into pieces of this many characters: all but the last become nested
// directories. With the longest suffix (a temporary name, ~40 characters) a name stays well
// under the usual 255-byte limit.
constexpr size_t kNamePieceChars = 180;

// Every byte but [A-Za-z0-9_-] becomes %XX. '.' is escaped too, so the suffixes ".d", ".v",
// ".lock" and ".tmp..." that the store appends can never be confused with key bytes, which
// makes the key -> path mapping one-to-one.
std::string EscapeKey(absl::string_view key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size());
  for (unsigned char c : key) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
        c == '-') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

// A temporary-file suffix no other writer (thread or process) uses at the same time.
std::string UniqueTempSuffix() {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(".tmp.", getpid(), ".", static_cast<long>(syscall(SYS_gettid)), ".",
                      counter.fetch_add(1, std::memory_order_relaxed));
}

// Closes a descriptor when it goes out of scope.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<FileStore>> FileStore::Open(std::string directory,
                                                           FileStoreOptions options) {
  if (directory.empty()) return InvalidArgumentError("file store: the directory path is empty");
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return InvalidArgumentError(absl::StrCat("file store: cannot create directory '", directory,
                                             "': ", error.message(),
                                             "; choose a writable directory all ranks can see"));
  }
  struct stat info;
  if (stat(directory.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return InvalidArgumentError(absl::StrCat("file store: '", directory, "' is not a directory"));
  }
  if (access(directory.c_str(), W_OK | X_OK) != 0) {
    return InvalidArgumentError(absl::StrCat("file store: directory '", directory,
                                             "' is not writable: ", std::strerror(errno)));
  }
  return std::unique_ptr<FileStore>(new FileStore(std::move(directory), options));
}

FileStore::FileStore(std::string directory, FileStoreOptions options)
    : directory_(std::move(directory)), options_(options) {}

std::string FileStore::Describe() const { return absl::StrCat("file store ", directory_); }

absl::Status FileStore::FileError(absl::string_view operation, const std::string& path,
                                  int error) const {
  struct stat info;
  if (stat(directory_.c_str(), &info) != 0) {
    return PeerUnavailableError(absl::StrCat(
        Describe(), ": the directory is gone (", operation, " '", path, "': ", std::strerror(error),
        "); was it deleted or unmounted while ranks were using it?"));
  }
  const std::string text =
      absl::StrCat(Describe(), ": cannot ", operation, " '", path, "': ", std::strerror(error));
  if (error == EACCES || error == EPERM || error == EROFS || error == ENOTDIR) {
    return InvalidArgumentError(
        absl::StrCat(text, "; every rank needs read and write access to the directory"));
  }
  return PeerUnavailableError(text);
}

absl::StatusOr<std::string> FileStore::PathFor(absl::string_view key, absl::string_view suffix,
                                               bool create_parents) const {
  CHORUS_RETURN_IF_ERROR(ValidateKey(key, Describe()));
  const std::string escaped = EscapeKey(key);
  std::string path = directory_;
  size_t start = 0;
  while (escaped.size() - start > kNamePieceChars) {
    absl::StrAppend(&path, "/", escaped.substr(start, kNamePieceChars), ".d");
    start += kNamePieceChars;
    if (create_parents && mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      return FileError("create directory", path, errno);
    }
  }
  absl::StrAppend(&path, "/", escaped.substr(start), suffix);
  return path;
}

absl::StatusOr<std::optional<std::string>> FileStore::ReadValue(absl::string_view key) const {
  CHORUS_ASSIGN_OR_RETURN(const std::string path, PathFor(key, ".v", /*create_parents=*/false));
  ScopedFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno != ENOENT) return FileError("open", path, errno);
    // Absent key, unless the whole directory vanished: then waiting would be a hang.
    if (access(directory_.c_str(), F_OK) != 0) return FileError("open", path, ENOENT);
    return std::optional<std::string>();
  }
  std::string value;
  struct stat info;
  if (fstat(fd.get(), &info) == 0) value.reserve(static_cast<size_t>(info.st_size));
  char buffer[64 * 1024];
  while (true) {
    const ssize_t n = read(fd.get(), buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return FileError("read", path, errno);
    }
    value.append(buffer, static_cast<size_t>(n));
  }
  return std::optional<std::string>(std::move(value));
}

absl::Status FileStore::WriteValue(absl::string_view key, absl::string_view value) const {
  CHORUS_ASSIGN_OR_RETURN(const std::string path, PathFor(key, ".v", /*create_parents=*/true));
  const std::string temp = path.substr(0, path.size() - 2) + UniqueTempSuffix();
  absl::Status status;
  {
    ScopedFd fd(open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) return FileError("create", temp, errno);
    size_t written = 0;
    while (written < value.size() && status.ok()) {
      const ssize_t n = write(fd.get(), value.data() + written, value.size() - written);
      if (n < 0 && errno != EINTR) status = FileError("write", temp, errno);
      if (n > 0) written += static_cast<size_t>(n);
    }
  }
  // The rename is the commit point: before it readers see the old value, after it the new one.
  if (status.ok() && rename(temp.c_str(), path.c_str()) != 0) {
    status = FileError("rename into place", path, errno);
  }
  if (!status.ok()) unlink(temp.c_str());
  return status;
}

absl::Status FileStore::Set(absl::string_view key, absl::string_view value) {
  return WriteValue(key, value);
}

absl::StatusOr<std::string> FileStore::Get(absl::string_view key, Deadline deadline) {
  const std::string owned(key);
  CHORUS_ASSIGN_OR_RETURN(std::vector<std::string> values,
                          MultiGet(absl::MakeConstSpan(&owned, 1), deadline));
  return std::move(values[0]);
}

absl::StatusOr<std::optional<std::string>> FileStore::TryGet(absl::string_view key) {
  return ReadValue(key);
}

absl::StatusOr<int64_t> FileStore::Add(absl::string_view key, int64_t delta) {
  CHORUS_ASSIGN_OR_RETURN(const std::string lock_path,
                          PathFor(key, ".lock", /*create_parents=*/true));
  // The lock file is never deleted: unlinking it while another process holds or is about to
  // take its lock would let two processes hold "the" lock at once.
  ScopedFd lock(open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (lock.get() < 0) return FileError("create lock file", lock_path, errno);
  const Deadline give_up = Deadline::After(options_.lock_timeout);
  PollBackoff backoff(options_.poll_initial, options_.poll_max);
  while (flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) return FileError("lock", lock_path, errno);
    if (!backoff.SleepBefore(give_up)) {
      return PeerUnavailableError(absl::StrCat(
          Describe(), ": could not lock '", lock_path, "' for ",
          absl::FormatDuration(options_.lock_timeout), " to add to key '", absl::CHexEscape(key),
          "'; another process holds it (is one stopped or stuck?)"));
    }
  }
  // flock is released when `lock` is closed, after the new value has been renamed into place.
  CHORUS_ASSIGN_OR_RETURN(std::optional<std::string> current, ReadValue(key));
  int64_t value = 0;
  if (current.has_value() && !absl::SimpleAtoi(*current, &value)) {
    return InvalidArgumentError(absl::StrCat(Describe(), ": key '", absl::CHexEscape(key),
                                             "' holds a non-integer value; cannot add to it"));
  }
  value += delta;
  CHORUS_RETURN_IF_ERROR(WriteValue(key, absl::StrCat(value)));
  return value;
}

absl::Status FileStore::Delete(absl::string_view key) {
  CHORUS_ASSIGN_OR_RETURN(const std::string path, PathFor(key, ".v", /*create_parents=*/false));
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return FileError("delete", path, errno);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> FileStore::MultiGet(absl::Span<const std::string> keys,
                                                             Deadline deadline) {
  const absl::Time start = absl::Now();
  std::vector<std::optional<std::string>> found(keys.size());
  PollBackoff backoff(options_.poll_initial, options_.poll_max);
  while (true) {
    std::vector<std::string> missing;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (found[i].has_value()) continue;
      CHORUS_ASSIGN_OR_RETURN(found[i], ReadValue(keys[i]));
      if (!found[i].has_value()) missing.push_back(keys[i]);
    }
    if (missing.empty()) break;
    if (!backoff.SleepBefore(deadline)) {
      return DeadlineExceededError(absl::StrCat(
          Describe(), ": keys [", DescribeKeys(missing), "] were not set within ",
          absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(1))),
          "; check that every rank started and uses the same directory"));
    }
  }
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (std::optional<std::string>& value : found) values.push_back(*std::move(value));
  return values;
}

}  // namespace chorus
