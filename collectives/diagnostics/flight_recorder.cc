#include "chorus/collectives/diagnostics/flight_recorder.h"

#include <algorithm>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "chorus/collectives/engine/context.h"
#include "chorus/core/deadline.h"
#include "chorus/core/env.h"
#include "chorus/core/logging.h"

namespace chorus {
namespace {

std::string FormatSeconds(Deadline::Clock::duration duration) {
  const double seconds = std::chrono::duration<double>(duration).count();
  if (seconds < 1e-3) return absl::StrFormat("%.0f us", seconds * 1e6);
  if (seconds < 1) return absl::StrFormat("%.2f ms", seconds * 1e3);
  return absl::StrFormat("%.2f s", seconds);
}

// A steady-clock reading as wall-clock time of day.
std::string ClockTextOf(Deadline::Clock::time_point when) { return ClockText(WallTimeOf(when)); }

}  // namespace

void FlightRecord::Reset(const CollectiveHeader& header, FlightState state,
                         Deadline::Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  header_ = header;
  state_ = state;
  outcome_.clear();
  queued_ = started_ = now;
  ended_ = Deadline::Clock::time_point::min();
  live_.store(nullptr, std::memory_order_relaxed);
  frozen_progress_.clear();
}

void FlightRecord::Start(const CollectiveContext* live, Deadline::Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  state_ = FlightState::kRunning;
  started_ = now;
  live_.store(live, std::memory_order_release);
}

void FlightRecord::Finish(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  ended_ = Deadline::Clock::now();
  if (state_ == FlightState::kQueued) started_ = ended_;
  state_ = status.ok() ? FlightState::kCompleted : FlightState::kFailed;
  if (!status.ok()) {
    outcome_ = std::string(status.message());
    if (const CollectiveContext* live = live_.load(std::memory_order_acquire)) {
      frozen_progress_ = live->DescribeProgress();
    }
  }
  live_.store(nullptr, std::memory_order_relaxed);
}

std::string FlightRecord::Describe(Deadline::Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string line = absl::StrCat("  ", header_.Describe(), ": ");
  switch (state_) {
    case FlightState::kQueued:
      absl::StrAppend(&line, "QUEUED for ", FormatSeconds(now - queued_),
                      " (behind earlier asynchronous collectives)\n");
      return line;
    case FlightState::kRunning:
      absl::StrAppend(&line, "RUNNING for ", FormatSeconds(now - started_), ", started ",
                      ClockTextOf(started_), "\n");
      if (const CollectiveContext* live = live_.load(std::memory_order_acquire)) {
        absl::StrAppend(&line, live->DescribeProgress());
      }
      return line;
    case FlightState::kCompleted:
      absl::StrAppend(&line, "COMPLETED in ", FormatSeconds(ended_ - started_), ", started ",
                      ClockTextOf(started_), "\n");
      return line;
    case FlightState::kFailed:
      absl::StrAppend(&line, "FAILED after ", FormatSeconds(ended_ - started_), ", started ",
                      ClockTextOf(started_), ": ", outcome_, "\n", frozen_progress_);
      return line;
  }
  return line;
}

FlightRecorder::FlightRecorder(int rank, std::string name, size_t capacity, std::string file)
    : rank_(rank), name_(std::move(name)), file_(std::move(file)), ring_(capacity) {}

FlightRecordPtr FlightRecorder::Add(const CollectiveHeader& header, FlightState state,
                                    Deadline::Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ring_.empty()) return nullptr;
  FlightRecordPtr& slot = ring_[added_++ % ring_.size()];
  // Reuse the evicted record unless someone still holds it (a collective still in flight, or
  // a dump in progress). Only this class hands records out, under mu_, so the count is exact.
  if (slot == nullptr || slot.use_count() > 1) slot = std::make_shared<FlightRecord>();
  slot->Reset(header, state, now);
  return slot;
}

std::string FlightRecorder::Dump() const {
  std::vector<FlightRecordPtr> records;
  uint64_t added = 0;
  size_t ring_size = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    added = added_;
    ring_size = ring_.size();
    const size_t kept = std::min<uint64_t>(added_, ring_.size());
    // Oldest first: the slot after the newest, wrapping.
    for (size_t i = 0; i < kept; ++i) {
      records.push_back(ring_[(added_ - kept + i) % ring_.size()]);
    }
  }
  const Deadline::Clock::time_point now = Deadline::Clock::now();
  std::string dump = absl::StrCat("rank ", rank_, " communicator ", name_, ": flight recorder ");
  if (ring_size == 0) return absl::StrCat(dump, "off (CHORUS_FLIGHT_RECORDER=0)\n");
  absl::StrAppend(&dump, "at ", ClockTextOf(now), ", last ", records.size(), " of ", added,
                  " collectives, oldest first\n");
  for (const FlightRecordPtr& record : records) absl::StrAppend(&dump, record->Describe(now));
  return dump;
}

void FlightRecorder::Report(absl::string_view reason) const {
  const std::string dump = Dump();
  ScopedLogRank log_rank(rank_);
  // The log line gets its own newline.
  CHORUS_LOG(kError, "flight") << reason << "; flight recorder dump follows\n"
                               << absl::string_view(dump).substr(0, dump.size() - 1);
  if (file_.empty()) return;
  const std::string path = ExpandRankPattern(file_, rank_);
  std::ofstream out(path, std::ios::app);
  out << "=== " << reason << "\n" << dump;
  out.flush();
  if (!out) {
    CHORUS_LOG(kWarn, "flight") << "could not append the dump to " << path;
  }
}

}  // namespace chorus
