// Observability: the flight recorder (dumped on timeout, on a signal and on request), the
// Chrome trace timeline, and log lines of blocking collectives carrying the caller's rank.
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "chorus/core/logging.h"
#include "chorus/core/status.h"
#include "tests/collectives/test_transport.h"
#include "tests/harness/multirank.h"

namespace chorus::testing {
namespace {

const TransportKind kTransport = kTestTransport;

absl::Status ExpectContains(const std::string& text, const std::string& part) {
  return Expect(absl::StrContains(text, part), absl::StrCat("no '", part, "' in:\n", text));
}

// Sets environment variables for its lifetime (before any communicator exists: they are
// read when one is created), then restores them.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<std::string, std::string>> values) {
    for (const auto& [name, value] : values) {
      const char* old = std::getenv(name.c_str());
      saved_.emplace_back(name, old != nullptr ? std::optional<std::string>(old) : std::nullopt);
      setenv(name.c_str(), value.c_str(), 1);
    }
    ReloadLogConfig();
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
    ReloadLogConfig();
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream content;
  content << file.rdbuf();
  return content.str();
}

// The log file of this process under `prefix` (core/logging.h names it <prefix>.<pid>.log).
std::string ReadLog(const std::string& prefix) {
  return ReadFile(absl::StrCat(prefix, ".", getpid(), ".log"));
}

// Ranks 0 and 1 ran allreduce #0 with rank 2, then timed out in allreduce #1 (ring), which
// rank 2 never entered: their dumps must say so.
absl::Status CheckTimeoutDump(Communicator& comm, const absl::Status& timed_out) {
  CHORUS_RETURN_IF_ERROR(
      Expect(GetErrorKind(timed_out) == ErrorKind::kDeadlineExceeded, timed_out.ToString()));
  const std::string dump = comm.FlightRecorderDump();
  CHORUS_RETURN_IF_ERROR(ExpectContains(dump, "last 2 of 2 collectives"));
  CHORUS_RETURN_IF_ERROR(ExpectContains(dump, "allreduce #0 (ring, 1000 x float32"));
  CHORUS_RETURN_IF_ERROR(ExpectContains(dump, "COMPLETED"));
  CHORUS_RETURN_IF_ERROR(ExpectContains(dump, "allreduce #1 (ring, 1000 x float32"));
  CHORUS_RETURN_IF_ERROR(ExpectContains(dump, "FAILED"));
  CHORUS_RETURN_IF_ERROR(ExpectContains(dump, "last waited on"));
  // Rank 0 receives from rank 2 in the ring, so it knows rank 2 never started.
  if (comm.rank() != 0) return absl::OkStatus();
  CHORUS_RETURN_IF_ERROR(ExpectContains(dump, "rank 2: SILENT"));
  CHORUS_RETURN_IF_ERROR(ExpectContains(dump, "rank 2 has not entered allreduce #1"));
  return ExpectContains(dump, "a receive from rank 2 at step");
}

// Ranks 0 and 1 stay connected until the other has timed out too (a rank that leaves early
// would turn the other's timeout into "connection closed").
absl::Status MeetOtherSurvivor(Communicator& comm) {
  const int other = 1 - comm.rank();
  int32_t mine = comm.rank();
  int32_t theirs = 0;
  WorkPtr sent = comm.SendAsync(&mine, 1, DataType::kInt32, other, 2);
  CHORUS_RETURN_IF_ERROR(comm.Recv(&theirs, 1, DataType::kInt32, other, 2));
  return sent->Wait(absl::Seconds(10));
}

TEST_CASE("a timeout dumps the flight recorder, naming the collective and the silent rank",
          "[flight]") {
  TempDir dir;
  const std::string log = absl::StrCat(dir.path(), "/log");
  const std::string dumps = absl::StrCat(dir.path(), "/flight.%r");
  ScopedEnv env{
      {"CHORUS_LOG", "warn"}, {"CHORUS_LOG_FILE", log}, {"CHORUS_FLIGHT_RECORDER_FILE", dumps}};
  const absl::Status status = RunOnThreads(
      kTransport, 3,
      [&](Communicator& comm) -> absl::Status {
        std::vector<float> data(1000, 1.0f);
        CollectiveOptions options;
        options.algorithm = "ring";
        CHORUS_RETURN_IF_ERROR(comm.AllReduce(data.data(), data.data(), data.size(),
                                              DataType::kFloat32, ReduceOp::kSum, options));
        int32_t token = 0;
        if (comm.rank() == 2) {  // stays alive but never calls allreduce #1
          CHORUS_RETURN_IF_ERROR(comm.Recv(&token, 1, DataType::kInt32, 0, 1));
          return comm.Recv(&token, 1, DataType::kInt32, 1, 1);
        }
        options.timeout = absl::Milliseconds(500);
        absl::Status timed_out;
        if (comm.rank() == 0) {
          // Asynchronous, so that this thread can dump the collective while it runs.
          WorkPtr work = comm.AllReduceAsync(data.data(), data.data(), data.size(),
                                             DataType::kFloat32, ReduceOp::kSum, options);
          std::string live;
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (!absl::StrContains(live, "rank 2: SILENT") && !work->Test() &&
                 std::chrono::steady_clock::now() < until) {
            live = comm.FlightRecorderDump();
          }
          CHORUS_RETURN_IF_ERROR(ExpectContains(live, "allreduce #1 (ring, 1000 x float32"));
          CHORUS_RETURN_IF_ERROR(ExpectContains(live, "RUNNING for"));
          CHORUS_RETURN_IF_ERROR(ExpectContains(live, "rank 2: SILENT"));
          timed_out = work->Wait(absl::Seconds(30));
        } else {
          timed_out = comm.AllReduce(data.data(), data.data(), data.size(), DataType::kFloat32,
                                     ReduceOp::kSum, options);
        }
        CHORUS_RETURN_IF_ERROR(CheckTimeoutDump(comm, timed_out));
        CHORUS_RETURN_IF_ERROR(MeetOtherSurvivor(comm));
        return comm.Send(&token, 1, DataType::kInt32, 2, 1);  // releases rank 2
      },
      absl::Minutes(1));
  INFO(status.ToString());
  REQUIRE(status.ok());
  // The timeout path logged the dump at error level, once per timed-out collective.
  const std::string logged = ReadLog(log);
  INFO(logged);
  CHECK(absl::StrContains(logged, "[chorus E "));
  CHECK(absl::StrContains(logged, "rank 0 flight] allreduce #1 (ring, 1000 x float32"));
  CHECK(absl::StrContains(logged, "rank 2 has not entered allreduce #1"));
  const std::vector<std::string> reports = absl::StrSplit(logged, "flight recorder dump follows");
  CHECK(reports.size() == 3);  // ranks 0 and 1
  // ... and appended it to each rank's dump file.
  const std::string file = ReadFile(absl::StrCat(dir.path(), "/flight.0"));
  CHECK(absl::StrContains(file, "timed out"));
  CHECK(absl::StrContains(file, "rank 2: SILENT"));
  CHECK(absl::StrContains(ReadFile(absl::StrCat(dir.path(), "/flight.1")), "allreduce #1"));
}

TEST_CASE("ranks whose peer process is SIGSTOPped dump a recorder naming it", "[flight]") {
  // Ranks as processes need a transport between processes, whichever this target tests.
  const absl::Status status = RunOnProcesses(
      TransportKind::kTcp, 3,
      [](Communicator& comm) -> absl::Status {
        std::vector<float> data(1000, 1.0f);
        CollectiveOptions options;
        options.algorithm = "ring";
        CHORUS_RETURN_IF_ERROR(comm.AllReduce(data.data(), data.data(), data.size(),
                                              DataType::kFloat32, ReduceOp::kSum, options));
        if (comm.rank() == 2) {
          raise(SIGSTOP);  // stays stopped until the harness kills it
          return InternalError("rank 2 was continued");
        }
        options.timeout = absl::Seconds(1);
        const absl::Status timed_out = comm.AllReduce(data.data(), data.data(), data.size(),
                                                      DataType::kFloat32, ReduceOp::kSum, options);
        CHORUS_RETURN_IF_ERROR(CheckTimeoutDump(comm, timed_out));
        return MeetOtherSurvivor(comm);
      },
      absl::Seconds(8));
  // The first rank that did not exit cleanly: only rank 2, which never returned.
  INFO(status.ToString());
  CHECK(absl::StrContains(status.message(), "rank 2 (pid"));
  CHECK(absl::StrContains(status.message(), "timed out and was killed"));
}

TEST_CASE("the flight recorder keeps only the last N collectives", "[flight]") {
  CommunicatorOptions options;
  options.flight_recorder_entries = 4;
  const absl::Status status = RunOnThreads(
      kTransport, 2,
      [](Communicator& comm) -> absl::Status {
        for (int i = 0; i < 10; ++i) CHORUS_RETURN_IF_ERROR(comm.Barrier());
        const std::string dump = comm.FlightRecorderDump();
        CHORUS_RETURN_IF_ERROR(ExpectContains(dump, "last 4 of 10 collectives"));
        for (int i = 6; i < 10; ++i) {
          CHORUS_RETURN_IF_ERROR(ExpectContains(dump, absl::StrCat("barrier #", i, " (")));
        }
        CHORUS_RETURN_IF_ERROR(
            Expect(!absl::StrContains(dump, "barrier #5 ("), "an evicted entry is still there"));
        const std::vector<std::string> lines = absl::StrSplit(dump, '\n', absl::SkipEmpty());
        return Expect(lines.size() == 5, dump);  // the heading and four collectives
      },
      absl::Minutes(1), options);
  INFO(status.ToString());
  CHECK(status.ok());
}

// More collectives in flight than the recorder keeps: the ring moves past records whose
// collectives still run, which write them to the end, while another thread dumps throughout
// (under the sanitizers, a record freed or reused too soon is an error here).
TEST_CASE("records outlive the ring while their collectives run, and dumps read them meanwhile",
          "[flight]") {
  CommunicatorOptions options;
  options.flight_recorder_entries = 2;
  constexpr int kInFlight = 6;
  constexpr int kRounds = 20;
  const absl::Status status = RunOnThreads(
      kTransport, 2,
      [](Communicator& comm) -> absl::Status {
        std::atomic<bool> running{true};
        std::atomic<int> dumps{0};
        std::thread dumper([&] {
          while (running.load()) {
            if (absl::StrContains(comm.FlightRecorderDump(), "flight recorder at")) ++dumps;
          }
        });
        absl::Status result;
        for (int round = 0; round < kRounds && result.ok(); ++round) {
          std::vector<int32_t> data(kInFlight * 256, comm.rank() + 1);
          std::vector<WorkPtr> works;
          for (int i = 0; i < kInFlight; ++i) {
            works.push_back(comm.AllReduceAsync(data.data() + i * 256, data.data() + i * 256, 256,
                                                DataType::kInt32, ReduceOp::kSum));
          }
          for (WorkPtr& work : works) {
            const absl::Status waited = work->Wait(absl::Seconds(30));
            if (result.ok()) result = waited;
          }
          if (result.ok()) result = Expect(data == std::vector<int32_t>(data.size(), 3), "sums");
        }
        running.store(false);
        dumper.join();
        CHORUS_RETURN_IF_ERROR(result);
        CHORUS_RETURN_IF_ERROR(Expect(dumps.load() > 0, "no dump ran"));
        const std::string dump = comm.FlightRecorderDump();
        CHORUS_RETURN_IF_ERROR(
            ExpectContains(dump, absl::StrCat("last 2 of ", kInFlight * kRounds, " collectives")));
        return Expect(!absl::StrContains(dump, "RUNNING") && !absl::StrContains(dump, "QUEUED"),
                      dump);
      },
      absl::Minutes(2), options);
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("CHORUS_FLIGHT_RECORDER=0 turns the recorder off", "[flight]") {
  ScopedEnv env{{"CHORUS_FLIGHT_RECORDER", "0"}};
  const absl::Status status = RunOnThreads(
      kTransport, 2,
      [](Communicator& comm) -> absl::Status {
        CHORUS_RETURN_IF_ERROR(comm.Barrier());
        return ExpectContains(comm.FlightRecorderDump(),
                              "flight recorder off (CHORUS_FLIGHT_RECORDER=0)");
      },
      absl::Minutes(1));
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("a signal dumps every live communicator", "[flight]") {
  TempDir dir;
  ScopedEnv env{{"CHORUS_FLIGHT_RECORDER_SIGNAL", "SIGUSR1"},
                {"CHORUS_FLIGHT_RECORDER_FILE", absl::StrCat(dir.path(), "/flight.%r")},
                {"CHORUS_LOG_FILE", absl::StrCat(dir.path(), "/log")}};
  const absl::Status status = RunOnThreads(
      kTransport, 2,
      [&](Communicator& comm) -> absl::Status {
        std::vector<int32_t> data(16, 1);
        CHORUS_RETURN_IF_ERROR(comm.AllReduce(data.data(), data.data(), data.size(),
                                              DataType::kInt32, ReduceOp::kSum));
        CHORUS_RETURN_IF_ERROR(comm.Barrier());  // both communicators are registered now
        if (comm.rank() == 0) raise(SIGUSR1);
        const std::string path = absl::StrCat(dir.path(), "/flight.", comm.rank());
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        std::string dump;
        while (!absl::StrContains(dump, "barrier #1") && std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          dump = ReadFile(path);
        }
        CHORUS_RETURN_IF_ERROR(ExpectContains(dump, absl::StrCat("signal ", SIGUSR1, " received")));
        CHORUS_RETURN_IF_ERROR(ExpectContains(dump, "allreduce #0"));
        CHORUS_RETURN_IF_ERROR(ExpectContains(dump, "barrier #1"));
        return comm.Barrier();  // neither leaves before the other has its dump
      },
      absl::Minutes(1));
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("CHORUS_TRACE_FILE writes a Chrome trace of collectives and waits", "[trace]") {
  TempDir dir;
  ScopedEnv env{{"CHORUS_TRACE_FILE", absl::StrCat(dir.path(), "/trace.%r.json")}};
  const absl::Status status = RunOnThreads(
      kTransport, 2,
      [](Communicator& comm) -> absl::Status {
        std::vector<float> data(1 << 18, 1.0f);
        for (int i = 0; i < 4; ++i) {
          CHORUS_RETURN_IF_ERROR(comm.AllReduce(data.data(), data.data(), data.size(),
                                                DataType::kFloat32, ReduceOp::kSum));
        }
        return comm.Barrier();
      },
      absl::Minutes(1));
  REQUIRE(status.ok());
  // Written when the communicators were destroyed; checked by Python's own JSON parser.
  for (int rank = 0; rank < 2; ++rank) {
    const std::string path = absl::StrCat(dir.path(), "/trace.", rank, ".json");
    const std::string check = absl::StrCat(
        "python3 -c \"import json, sys\n"
        "events = json.load(open(sys.argv[1]))['traceEvents']\n"
        "done = [e for e in events if e['ph'] == 'X']\n"
        "names = [e['name'] for e in done]\n"
        "assert names.count('allreduce') == 4 and names.count('barrier') == 1, names\n"
        "assert all(e['pid'] == ",
        rank,
        " and e['dur'] >= 0 and e['ts'] > 0 for e in done)\n"
        "assert all(e['args']['status'] == 'ok' for e in done if e['cat'] == 'collective')\n"
        "\" ",
        path);
    INFO(ReadFile(path));
    CHECK(std::system(check.c_str()) == 0);
  }
}

TEST_CASE("a blocking collective logs with the communicator's rank, then restores the thread's",
          "[logging]") {
  TempDir dir;
  const std::string log = absl::StrCat(dir.path(), "/log");
  ScopedEnv env{{"CHORUS_LOG", "debug"}, {"CHORUS_LOG_FILE", log}};
  const absl::Status status = RunOnThreads(
      kTransport, 2,
      [](Communicator& comm) -> absl::Status {
        SetThreadLogRank(-1);  // a user thread: nobody set its rank
        std::vector<int32_t> data(4, 1);
        CHORUS_RETURN_IF_ERROR(comm.AllReduce(data.data(), data.data(), data.size(),
                                              DataType::kInt32, ReduceOp::kSum));
        return Expect(ThreadLogRank() == -1, "the collective left its rank on the thread");
      },
      absl::Minutes(1));
  REQUIRE(status.ok());
  const std::string logged = ReadLog(log);
  INFO(logged);
  CHECK(absl::StrContains(logged, "rank 0 collectives] allreduce #0"));
  CHECK(absl::StrContains(logged, "rank 1 collectives] allreduce #0"));
  CHECK(!absl::StrContains(logged, "rank ? collectives"));
}

}  // namespace
}  // namespace chorus::testing
