// What one non-blocking read, write or handshake step on a link did (channel.h, tls.h).
#ifndef CHORUS_CORE_SECURITY_IO_RESULT_H_
#define CHORUS_CORE_SECURITY_IO_RESULT_H_

#include <cstddef>
#include <string>

namespace chorus::security {

struct IoResult {
  enum class Kind {
    kDone,       // `bytes` moved (a read of 0 bytes is kClosed, never kDone)
    kWantRead,   // try again when the socket is readable
    kWantWrite,  // try again when the socket is writable
    kClosed,     // the peer closed the link
    kError,      // the link failed: `error` says why
  };
  Kind kind = Kind::kDone;
  size_t bytes = 0;
  int error_number = 0;  // the errno behind kError, when a system call failed
  std::string error;

  bool done() const { return kind == Kind::kDone; }
  bool blocked() const { return kind == Kind::kWantRead || kind == Kind::kWantWrite; }
};

}  // namespace chorus::security

#endif  // CHORUS_CORE_SECURITY_IO_RESULT_H_
