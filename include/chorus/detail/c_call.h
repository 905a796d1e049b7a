// Implementation detail of the C++ API: turning chorus_c.h's results into Status values, and
// the unique ownership of C handles. Not part of the contract; may change in any version.
#ifndef CHORUS_DETAIL_C_CALL_H_
#define CHORUS_DETAIL_C_CALL_H_

#include <memory>

#include "chorus/chorus_c.h"
#include "chorus/status.h"

namespace chorus {
inline namespace v0 {
namespace detail {

// The Status of a C call that returned `code` (its message and peer are the thread's last
// error).
inline Status FromC(chorus_error_t code) {
  if (code == CHORUS_OK) return Status();
  return Status(static_cast<ErrorKind>(code), chorus_last_error(), chorus_last_error_peer());
}

// A C handle that its owner destroys with `Destroy`.
template <typename T, void (*Destroy)(T*)>
struct Deleter {
  void operator()(T* handle) const { Destroy(handle); }
};
template <typename T, void (*Destroy)(T*)>
using Handle = std::unique_ptr<T, Deleter<T, Destroy>>;

}  // namespace detail
}  // namespace v0
}  // namespace chorus

#endif  // CHORUS_DETAIL_C_CALL_H_
