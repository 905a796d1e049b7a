// A Chrome trace-event timeline of one communicator on this rank (CHORUS_TRACE_FILE): one
// complete ("X") event per collective and one per wait inside it that had to block, with
// pid = rank and tid = the thread that ran it. Open the file in chrome://tracing or
// https://ui.perfetto.dev; timestamps are wall-clock microseconds, so files of several ranks
// on one host line up when their "traceEvents" arrays are concatenated.
#ifndef CHORUS_COLLECTIVES_DIAGNOSTICS_TRACE_H_
#define CHORUS_COLLECTIVES_DIAGNOSTICS_TRACE_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace chorus {

// Thread-safe. Costs nothing unless a collective runs with tracing on: then an event (a few
// small strings) per collective and per blocking wait.
class TraceLog {
 public:
  using Args = std::vector<std::pair<std::string, std::string>>;

  // Writes to `path` ("%r" is the rank); `name` labels the process lane.
  TraceLog(std::string path, int rank, std::string name);

  // One complete event; `category` is "collective" or "wait". Beyond kMaxEvents events are
  // counted but dropped, so a long run cannot exhaust memory.
  void Add(std::string name, absl::string_view category, absl::Time start, absl::Time end,
           Args args = {});

  // Writes every event so far as {"traceEvents": [...]} (replacing the file).
  absl::Status Flush() const;

  static constexpr size_t kMaxEvents = size_t{1} << 20;

 private:
  struct Event {
    std::string name;
    absl::string_view category;
    int64_t start_us;
    int64_t duration_us;
    int tid;
    Args args;
  };

  const std::string path_;
  const int rank_;
  const std::string name_;
  mutable std::mutex mu_;
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
  size_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_DIAGNOSTICS_TRACE_H_
