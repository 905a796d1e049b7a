// Flight-recorder dumps on a signal (CHORUS_FLIGHT_RECORDER_SIGNAL), for a job that hangs
// without timing out: `kill -USR1 <pid>` makes every registered communicator of that process
// log its flight recorder (and append it to CHORUS_FLIGHT_RECORDER_FILE).
//
// The handler only writes the signal number to a pipe, which is async-signal-safe; a watcher
// thread, alive while any registration is, reads the pipe and does the dumping. A handler once
// installed stays installed, so that a late signal is still harmless rather than fatal.
#ifndef CHORUS_COLLECTIVES_DIAGNOSTICS_FLIGHT_RECORDER_SIGNAL_H_
#define CHORUS_COLLECTIVES_DIAGNOSTICS_FLIGHT_RECORDER_SIGNAL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chorus/collectives/diagnostics/flight_recorder.h"

namespace chorus {

// "SIGUSR1", "usr2", or a signal number -> the number; "off" or "0" -> 0 (no signal).
// InvalidArgument for anything else, and for signals that cannot be caught.
absl::StatusOr<int> ParseDumpSignal(absl::string_view text);

// While alive, `recorder` is reported when `signal` arrives. Thread-safe.
class SignalDumpRegistration {
 public:
  // Installs the handler for `signal` (once per process) and starts the watcher if needed.
  static absl::StatusOr<std::unique_ptr<SignalDumpRegistration>> Create(
      const FlightRecorder& recorder, int signal);
  // Stops the watcher when this was the last registration; a dump in progress finishes first.
  ~SignalDumpRegistration();
  SignalDumpRegistration(const SignalDumpRegistration&) = delete;
  SignalDumpRegistration& operator=(const SignalDumpRegistration&) = delete;

 private:
  explicit SignalDumpRegistration(const FlightRecorder& recorder) : recorder_(recorder) {}
  const FlightRecorder& recorder_;
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_DIAGNOSTICS_FLIGHT_RECORDER_SIGNAL_H_
