// Writing JSON text by hand (reports, trace files) without a JSON library.
#ifndef CHORUS_CORE_JSON_H_
#define CHORUS_CORE_JSON_H_

#include <string>

#include "absl/strings/string_view.h"

namespace chorus {

// `text` as a quoted JSON string, with quotes, backslashes and control characters escaped.
std::string JsonString(absl::string_view text);

}  // namespace chorus

#endif  // CHORUS_CORE_JSON_H_
