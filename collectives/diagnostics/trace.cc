#include "chorus/collectives/diagnostics/trace.h"

#include <atomic>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "chorus/core/env.h"
#include "chorus/core/json.h"
#include "chorus/core/status.h"

namespace chorus {
namespace {

// Small per-process thread numbers read better in a trace viewer than pthread ids.
int ThreadNumber() {
  static std::atomic<int> next{1};
  thread_local const int number = next.fetch_add(1);
  return number;
}

}  // namespace

TraceLog::TraceLog(std::string path, int rank, std::string name)
    : path_(ExpandRankPattern(path, rank)), rank_(rank), name_(std::move(name)) {}

void TraceLog::Add(std::string name, absl::string_view category, absl::Time start, absl::Time end,
                   Args args) {
  Event event{std::move(name),
              category,
              absl::ToUnixMicros(start),
              absl::ToInt64Microseconds(end - start),
              ThreadNumber(),
              std::move(args)};
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.size() >= kMaxEvents) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(event));
}

absl::Status TraceLog::Flush() const {
  std::string json = absl::StrCat(
      "{\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":", rank_,
      ",\"tid\":0,\"args\":{\"name\":", JsonString(absl::StrCat("rank ", rank_, " ", name_)), "}}");
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Event& event : events_) {
      absl::StrAppend(&json, ",\n{\"name\":", JsonString(event.name), ",\"cat\":\"", event.category,
                      "\",\"ph\":\"X\",\"ts\":", event.start_us, ",\"dur\":", event.duration_us,
                      ",\"pid\":", rank_, ",\"tid\":", event.tid, ",\"args\":{");
      for (size_t i = 0; i < event.args.size(); ++i) {
        absl::StrAppend(&json, i == 0 ? "" : ",", JsonString(event.args[i].first), ":",
                        JsonString(event.args[i].second));
      }
      json += "}}";
    }
    absl::StrAppend(&json, "\n],\"otherData\":{\"dropped_events\":", dropped_, "}}\n");
  }
  std::ofstream out(path_, std::ios::trunc);
  out << json;
  out.flush();
  if (!out) return InternalError(absl::StrCat("could not write the trace to ", path_));
  return absl::OkStatus();
}

}  // namespace chorus
