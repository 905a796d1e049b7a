// A store over a shared directory: one file per key, written to a temporary name and renamed
// into place, so readers in any process see a whole old value or a whole new one. Works on any
// file system with atomic rename within a directory and flock (local disks, tmpfs, NFSv4).
#ifndef CHORUS_RENDEZVOUS_FILE_STORE_H_
#define CHORUS_RENDEZVOUS_FILE_STORE_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chorus/rendezvous/store.h"

namespace chorus {

struct FileStoreOptions {
  // Waits poll the directory, starting at `poll_initial` between looks and doubling up to
  // `poll_max`; a missing key costs one failed open() per look.
  absl::Duration poll_initial = absl::Microseconds(100);
  absl::Duration poll_max = absl::Milliseconds(10);
  // Add() waits at most this long for another process holding the same key's lock (a process
  // stopped while holding it must not hang everyone else).
  absl::Duration lock_timeout = absl::Seconds(30);
};

// Thread-safe, and safe across processes sharing the directory: Set is an atomic rename, Add
// is a read-modify-write under flock on a per-key lock file. Keys are percent-escaped into file
// names (every byte but [A-Za-z0-9_-]); long keys are split into nested directories so no name
// exceeds the file system's limit.
class FileStore : public Store {
 public:
  // Opens (creating if needed) `directory`. InvalidArgument when it cannot be created, is not a
  // directory or is not writable.
  static absl::StatusOr<std::unique_ptr<FileStore>> Open(std::string directory,
                                                         FileStoreOptions options = {});

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, Deadline deadline) override;
  absl::StatusOr<std::optional<std::string>> TryGet(absl::string_view key) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::Status Delete(absl::string_view key) override;
  absl::StatusOr<std::vector<std::string>> MultiGet(absl::Span<const std::string> keys,
                                                    Deadline deadline) override;
  std::string Describe() const override;

  const std::string& directory() const { return directory_; }

 private:
  FileStore(std::string directory, FileStoreOptions options);

  // The path of `key`'s file of the given kind (".v" value, ".lock" Add's lock, or a temporary
  // name). Creates the nested directories of a long key when `create_parents`.
  absl::StatusOr<std::string> PathFor(absl::string_view key, absl::string_view suffix,
                                      bool create_parents) const;
  absl::StatusOr<std::optional<std::string>> ReadValue(absl::string_view key) const;
  absl::Status WriteValue(absl::string_view key, absl::string_view value) const;
  // The error for a failed file operation: kPeerUnavailable when the directory itself is gone,
  // kInvalidArgument for permissions, kPeerUnavailable otherwise.
  absl::Status FileError(absl::string_view operation, const std::string& path, int error) const;

  const std::string directory_;
  const FileStoreOptions options_;
};

}  // namespace chorus

#endif  // CHORUS_RENDEZVOUS_FILE_STORE_H_
