#include "chorus/collectives/diagnostics/flight_recorder.h"

#include <algorithm>
#include <fstream>
#include <thread>
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

// How long a record's collective took. A coarse end trails the truth by about a tick at most,
// so a shorter span says only that.
std::string FormatTook(Deadline::Clock::duration took, FlightClock clock) {
  if (clock == FlightClock::kPrecise) return FormatSeconds(took);
  const Deadline::Clock::duration tick = Deadline::CoarseTick();
  if (took < tick) return "under " + FormatSeconds(tick);
  return "about " + FormatSeconds(took);
}

// A steady-clock reading as wall-clock time of day.
std::string ClockTextOf(Deadline::Clock::time_point when) { return ClockText(WallTimeOf(when)); }

}  // namespace

void FlightRecord::Reset(const CollectiveHeader& header, FlightState state, FlightClock clock,
                         Deadline::Clock::time_point now) {
  header_ = header;
  clock_ = clock;
  queued_ = now;
  started_.store(TicksOf(now), std::memory_order_relaxed);
  ended_.store(0, std::memory_order_relaxed);
  live_.store(nullptr, std::memory_order_relaxed);
  outcome_.clear();
  frozen_progress_.clear();
  state_.store(state, std::memory_order_release);
}

bool FlightRecord::ended() const {
  const FlightState state = state_.load(std::memory_order_acquire);
  return state == FlightState::kCompleted || state == FlightState::kFailed;
}

void FlightRecord::Start(const CollectiveContext* live, Deadline::Clock::time_point now) {
  started_.store(TicksOf(now), std::memory_order_relaxed);
  live_.store(live, std::memory_order_relaxed);
  state_.store(FlightState::kRunning, std::memory_order_release);
}

void FlightRecord::Finish(const absl::Status& status) {
  // A failure is rare and worth timing precisely.
  const Deadline::Clock::time_point now = clock_ == FlightClock::kCoarse && status.ok()
                                              ? Deadline::CoarseNow()
                                              : Deadline::Clock::now();
  if (state_.load(std::memory_order_relaxed) == FlightState::kQueued) {
    started_.store(TicksOf(now), std::memory_order_relaxed);
  }
  ended_.store(TicksOf(now), std::memory_order_relaxed);
  if (!status.ok()) {
    outcome_ = std::string(status.message());
    if (const CollectiveContext* live = live_.load(std::memory_order_relaxed)) {
      frozen_progress_ = live->DescribeProgress();
    }
  }
  // A dump either finds `live_` cleared, or has announced itself before this load and is
  // waited for: both sides' accesses are sequentially consistent (LiveProgress).
  live_.store(nullptr, std::memory_order_seq_cst);
  while (live_readers_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  state_.store(status.ok() ? FlightState::kCompleted : FlightState::kFailed,
               std::memory_order_release);
}

std::string FlightRecord::LiveProgress() const {
  live_readers_.fetch_add(1, std::memory_order_seq_cst);
  const CollectiveContext* live = live_.load(std::memory_order_seq_cst);
  std::string progress = live != nullptr ? live->DescribeProgress() : std::string();
  live_readers_.fetch_sub(1, std::memory_order_release);
  return progress;
}

FlightRecord::Snapshot FlightRecord::Take() const {
  Snapshot record;
  record.header = header_;
  record.clock = clock_;
  record.state = state_.load(std::memory_order_acquire);
  record.queued = queued_;
  record.started = TimeOf(started_.load(std::memory_order_relaxed));
  record.ended = TimeOf(ended_.load(std::memory_order_relaxed));
  if (record.state == FlightState::kRunning) record.progress = LiveProgress();
  if (record.state == FlightState::kFailed) {
    record.outcome = outcome_;
    record.progress = frozen_progress_;
  }
  return record;
}

std::string FlightRecord::Describe(const Snapshot& record, Deadline::Clock::time_point now) {
  std::string line = absl::StrCat("  ", record.header.Describe(), ": ");
  switch (record.state) {
    case FlightState::kQueued:
      absl::StrAppend(&line, "QUEUED for ", FormatSeconds(now - record.queued),
                      " (behind earlier asynchronous collectives)\n");
      return line;
    case FlightState::kRunning:
      absl::StrAppend(&line, "RUNNING for ", FormatSeconds(now - record.started), ", started ",
                      ClockTextOf(record.started), "\n", record.progress);
      return line;
    case FlightState::kCompleted:
      absl::StrAppend(&line, "COMPLETED in ",
                      FormatTook(record.ended - record.started, record.clock), ", started ",
                      ClockTextOf(record.started), "\n");
      return line;
    case FlightState::kFailed:
      absl::StrAppend(&line, "FAILED after ", FormatSeconds(record.ended - record.started),
                      ", started ", ClockTextOf(record.started), ": ", record.outcome, "\n",
                      record.progress);
      return line;
  }
  return line;
}

FlightRecorder::FlightRecorder(int rank, std::string name, size_t capacity, std::string file)
    : rank_(rank), name_(std::move(name)), file_(std::move(file)), ring_(capacity) {}

FlightRecord* FlightRecorder::Add(const CollectiveHeader& header, FlightState state,
                                  FlightClock clock, Deadline::Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ring_.empty()) return nullptr;
  if (!evicted_.empty()) {
    evicted_.erase(
        std::remove_if(evicted_.begin(), evicted_.end(),
                       [](const std::unique_ptr<FlightRecord>& record) { return record->ended(); }),
        evicted_.end());
  }
  std::unique_ptr<FlightRecord>& slot = ring_[added_++ % ring_.size()];
  // The oldest record is reused once its collective has ended; one still running keeps it.
  if (slot != nullptr && !slot->ended()) evicted_.push_back(std::move(slot));
  if (slot == nullptr) slot = std::make_unique<FlightRecord>();
  slot->Reset(header, state, clock, now);
  return slot.get();
}

std::string FlightRecorder::Dump() const {
  std::vector<FlightRecord::Snapshot> records;
  uint64_t added = 0;
  size_t ring_size = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    added = added_;
    ring_size = ring_.size();
    const size_t kept = std::min<uint64_t>(added_, ring_.size());
    records.reserve(kept);
    // Oldest first: the slot after the newest, wrapping.
    for (size_t i = 0; i < kept; ++i) {
      records.push_back(ring_[(added_ - kept + i) % ring_.size()]->Take());
    }
  }
  const Deadline::Clock::time_point now = Deadline::Clock::now();
  std::string dump = absl::StrCat("rank ", rank_, " communicator ", name_, ": flight recorder ");
  if (ring_size == 0) return absl::StrCat(dump, "off (CHORUS_FLIGHT_RECORDER=0)\n");
  absl::StrAppend(&dump, "at ", ClockTextOf(now), ", last ", records.size(), " of ", added,
                  " collectives, oldest first\n");
  for (const FlightRecord::Snapshot& record : records) {
    absl::StrAppend(&dump, FlightRecord::Describe(record, now));
  }
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
