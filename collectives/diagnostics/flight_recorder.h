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
// Cost on the hot path: none per message, and no allocation. A collective takes a record from
// the ring under the ring's lock (recycling the oldest once its collective has ended); its own
// thread then writes the record without a lock: its state and end are atomics, published with
// release and read with acquire by a dump, which holds the ring's lock while it copies the
// records (so none is reset or freed meanwhile) and formats the copies after it, so that a dump
// holds up a collective that starts meanwhile only for the copying. The only locked
// instruction left at the end is the one that tells a dump reading the live progress that the
// collective is leaving (FlightRecord::Finish). Readings of the steady clock (its coarse
// reading for the end of a call on the shared slots: FlightClock) are kept as taken and
// converted only for a dump. Per-peer progress is read from the live CollectiveContext only
// when a dump is made, and frozen into the record when the collective fails.
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

enum class FlightState : uint8_t { kQueued, kRunning, kCompleted, kFailed };

// Which clock notes the end of a record's collective when it succeeds: the steady clock, or its
// coarse reading (Deadline::CoarseNow), for calls so short that a precise reading would be a
// tenth of their time. The start, and a failure's end, are always the steady clock's.
enum class FlightClock : uint8_t { kPrecise, kCoarse };

// One collective. Written by the thread running it, read by dumps on any thread.
class FlightRecord {
 public:
  // The collective, added queued, begins on this rank at `now`; `live` describes its progress
  // until Finish, which must be called before `live` is destroyed.
  void Start(const CollectiveContext* live, Deadline::Clock::time_point now);
  // As Start, for a collective added running (which began when it was added).
  void Track(const CollectiveContext* live) { live_.store(live, std::memory_order_release); }
  // The outcome. A failure keeps the progress with each peer as it was at this moment. The
  // last use of the record by its collective: the recorder may reuse it from then on.
  void Finish(const absl::Status& status);

 private:
  friend class FlightRecorder;
  using Ticks = Deadline::Clock::duration::rep;

  void Reset(const CollectiveHeader& header, FlightState state, FlightClock clock,
             Deadline::Clock::time_point now);

  // What a dump prints of a record, copied under the recorder's lock and formatted after it.
  struct Snapshot {
    CollectiveHeader header;
    FlightState state = FlightState::kQueued;
    FlightClock clock = FlightClock::kPrecise;
    Deadline::Clock::time_point queued;
    Deadline::Clock::time_point started;
    Deadline::Clock::time_point ended;
    std::string outcome;   // a failure's message
    std::string progress;  // a running collective's progress, or a failure's as it failed
  };

  // Whether its collective has ended (it wrote its last).
  bool ended() const;
  // The record as it stands; under the recorder's lock.
  Snapshot Take() const;
  // Its line in a dump (plus progress lines while unfinished), each ending in a newline.
  static std::string Describe(const Snapshot& record, Deadline::Clock::time_point now);
  // Progress lines of the live collective, if it is still running.
  std::string LiveProgress() const;

  static Ticks TicksOf(Deadline::Clock::time_point when) { return when.time_since_epoch().count(); }
  static Deadline::Clock::time_point TimeOf(Ticks ticks) {
    return Deadline::Clock::time_point(Deadline::Clock::duration(ticks));
  }

  // Set by Reset, under the recorder's lock, while no collective owns the record.
  CollectiveHeader header_;
  FlightClock clock_ = FlightClock::kPrecise;
  Deadline::Clock::time_point queued_;
  std::atomic<FlightState> state_{FlightState::kQueued};
  std::atomic<Ticks> started_{0};
  std::atomic<Ticks> ended_{0};
  std::atomic<const CollectiveContext*> live_{nullptr};
  // Dumps reading `live_` now: Finish waits for them before its context may go away.
  mutable std::atomic<int> live_readers_{0};
  // A failure's message and progress, written by Finish before it publishes kFailed.
  std::string outcome_;
  std::string frozen_progress_;
};

// The ring of one communicator's records. Thread-safe.
class FlightRecorder {
 public:
  // `capacity` records (0: disabled); dumps are appended to `file` (empty: none; "%r" is the
  // rank) besides being logged.
  FlightRecorder(int rank, std::string name, size_t capacity, std::string file);

  int rank() const { return rank_; }

  // A new record in `state` (kQueued or kRunning) as of `now`, whose end `clock` will note,
  // replacing the oldest; nullptr when disabled. (The caller reads the clock once for this and the
  // collective's start.) It stays valid until its Finish returns (within the recorder's life).
  FlightRecord* Add(const CollectiveHeader& header, FlightState state, FlightClock clock,
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
  std::vector<std::unique_ptr<FlightRecord>> ring_ ABSL_GUARDED_BY(mu_);  // filled in turn
  // Records pushed out of the ring while their collectives still ran (more than the ring's
  // capacity in flight at once); freed once those have ended.
  std::vector<std::unique_ptr<FlightRecord>> evicted_ ABSL_GUARDED_BY(mu_);
  uint64_t added_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_DIAGNOSTICS_FLIGHT_RECORDER_H_
