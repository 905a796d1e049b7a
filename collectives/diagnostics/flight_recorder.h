// The flight recorder: the last N collectives of one communicator on this rank, with their
// state, timings and, while one is unfinished, its progress with each peer, so that a dump
// taken on any rank of a hung job says which collective, which step and which peer it waits
// for. Dumped on timeout (Communicator), on a signal (flight_recorder_signal.h) and on request
// (Communicator::FlightRecorderDump).
//
//   rank 0 communicator job/world: flight recorder at 08:01:13.441345, last 2 of 2 collectives, ...
//     allreduce #0 (ring, 1048576 x float32 (4 MiB), sum): COMPLETED in 12.33 ms, started ...
//     allreduce #1 (ring, 1048576 x float32 (4 MiB), sum): RUNNING for 1.84 s, started ...
//       last waited on a receive from rank 2 at step 0
//       rank 1: sends 2/2 done (1.3 MiB of 1.3 MiB); no receives
//       rank 2: SILENT, its header never arrived; no sends; receives 0/6 done (0 B of 4 MiB), ...
//       => rank 2 has not entered allreduce #1 (...): look at what it is doing (...)
//
// Cost on the hot path: none per message. A collective takes a record from the ring (recycled
// once the ring is full, so no allocation) under the ring's lock, and locks the record as it
// is added and as it ends (an asynchronous one also as it starts); the record keeps steady
// clock readings as taken, converted only for a dump. Per-peer progress is read from the live
// CollectiveContext only when a dump is made, and frozen into the record when the collective
// fails.
#ifndef CHORUS_COLLECTIVES_DIAGNOSTICS_FLIGHT_RECORDER_H_
#define CHORUS_COLLECTIVES_DIAGNOSTICS_FLIGHT_RECORDER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "chorus/collectives/engine/header.h"
#include "chorus/core/deadline.h"

namespace chorus {

class CollectiveContext;

enum class FlightState { kQueued, kRunning, kCompleted, kFailed };

// One collective. Thread-safe.
class FlightRecord {
 public:
  // The collective, added queued, begins on this rank at `now`; `live` describes its progress
  // until Finish, which must be called before `live` is destroyed.
  void Start(const CollectiveContext* live, Deadline::Clock::time_point now);
  // As Start, for a collective added running (which began when it was added). It takes no
  // lock: a dump reads `live` under the record's lock, and Finish clears it under that lock.
  void Track(const CollectiveContext* live) { live_.store(live, std::memory_order_release); }
  // The outcome. A failure keeps the progress with each peer as it was at this moment.
  void Finish(const absl::Status& status);

  // Its line in a dump (plus progress lines while unfinished), each ending in a newline.
  std::string Describe(Deadline::Clock::time_point now) const;

 private:
  friend class FlightRecorder;
  void Reset(const CollectiveHeader& header, FlightState state, Deadline::Clock::time_point now);

  mutable std::mutex mu_;
  CollectiveHeader header_ ABSL_GUARDED_BY(mu_);
  FlightState state_ ABSL_GUARDED_BY(mu_) = FlightState::kQueued;
  std::string outcome_ ABSL_GUARDED_BY(mu_);  // the error message of a failure
  // Readings of the steady clock as they were taken; a dump converts them.
  Deadline::Clock::time_point queued_ ABSL_GUARDED_BY(mu_);
  Deadline::Clock::time_point started_ ABSL_GUARDED_BY(mu_);
  Deadline::Clock::time_point ended_ ABSL_GUARDED_BY(mu_);
  // Set without the lock by Track, cleared under it.
  std::atomic<const CollectiveContext*> live_{nullptr};
  std::string frozen_progress_ ABSL_GUARDED_BY(mu_);
};

using FlightRecordPtr = std::shared_ptr<FlightRecord>;

// The ring of one communicator's records. Thread-safe.
class FlightRecorder {
 public:
  // `capacity` records (0: disabled); dumps are appended to `file` (empty: none; "%r" is the
  // rank) besides being logged.
  FlightRecorder(int rank, std::string name, size_t capacity, std::string file);

  int rank() const { return rank_; }

  // A new record in `state` (kQueued or kRunning) as of `now`, replacing the oldest; nullptr
  // when disabled. (The caller reads the clock once for this and the collective's start.)
  FlightRecordPtr Add(const CollectiveHeader& header, FlightState state,
                      Deadline::Clock::time_point now);

  // Every record kept, oldest first, with a heading line naming the rank and communicator.
  std::string Dump() const;

  // Logs Dump() at error level, saying why, and appends it to the dump file if one is set.
  void Report(absl::string_view reason) const;

 private:
  const int rank_;
  const std::string name_;
  const std::string file_;
  mutable std::mutex mu_;
  std::vector<FlightRecordPtr> ring_ ABSL_GUARDED_BY(mu_);  // capacity slots, filled in turn
  uint64_t added_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_DIAGNOSTICS_FLIGHT_RECORDER_H_
