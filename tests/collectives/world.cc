#include "tests/collectives/world.h"

#include <atomic>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chorus/core/status.h"
#include "chorus/rendezvous/file_store.h"
#include "chorus/rendezvous/memory_store.h"
#include "chorus/transport/inproc/inproc_device.h"
#include "chorus/transport/shm/shm_device.h"
#include "chorus/transport/tcp/tcp_device.h"
#include "tests/harness/multirank.h"
#include "tests/transport/transport_factory.h"

namespace chorus::testing {
namespace {

std::string FreshName() {
  static std::atomic<int> counter{0};
  return absl::StrCat("test", counter.fetch_add(1));
}

absl::Status RunRank(Store& store, const std::string& name, TransportKind kind, int rank, int ranks,
                     const CommBody& body, const CommunicatorOptions& options) {
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, MakeDevice(kind, rank));
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                          Communicator::Create(store, name, *device, rank, ranks, options));
  return body(*comm);
}

absl::Status FirstError(const std::vector<absl::Status>& statuses) {
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    if (!statuses[rank].ok()) return Annotate(statuses[rank], absl::StrCat("rank ", rank));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Expect(bool condition, const std::string& what) {
  return condition ? absl::OkStatus() : InternalError(what);
}

absl::Status ExpectInvalidArgument(const absl::Status& status, const std::string& words) {
  return Expect(GetErrorKind(status) == ErrorKind::kInvalidArgument &&
                    std::string(status.message()).find(words) != std::string::npos,
                "expected InvalidArgument with '" + words + "', got " + status.ToString());
}

std::string TransportName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kInproc:
      return "inproc";
    case TransportKind::kTcp:
      return "tcp";
    case TransportKind::kShm:
      return "shm";
    case TransportKind::kHybrid:
      return "hybrid";
    case TransportKind::kIbverbs:
      return "ibverbs";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<Device>> MakeDevice(TransportKind kind, int rank) {
  if (kind == TransportKind::kInproc) return std::unique_ptr<Device>(new InprocDevice());
  if (kind == TransportKind::kShm) return shm::CreateShmDevice();
  if (kind == TransportKind::kIbverbs) return VerbsTransport().create_device(rank);
  if (kind == TransportKind::kHybrid) {
    return HybridTransport("hybrid", [](int r) { return r / 2; }).create_device(rank);
  }
  tcp::TcpDeviceOptions options;
  options.address = "127.0.0.1";  // tests stay on loopback
  return tcp::CreateTcpDevice(options);
}

std::vector<absl::Status> RunOnThreadsAll(TransportKind kind, int ranks, const CommBody& body,
                                          absl::Duration timeout,
                                          const CommunicatorOptions& options) {
  MemoryStore store;
  const std::string name = FreshName();
  return RunRanksAsThreads(
      ranks, [&](int rank) { return RunRank(store, name, kind, rank, ranks, body, options); },
      timeout);
}

absl::Status RunOnThreads(TransportKind kind, int ranks, const CommBody& body,
                          absl::Duration timeout, const CommunicatorOptions& options) {
  return FirstError(RunOnThreadsAll(kind, ranks, body, timeout, options));
}

absl::Status RunOnProcesses(TransportKind kind, int ranks, const CommBody& body,
                            absl::Duration timeout, const CommunicatorOptions& options) {
  TempDir dir;
  const std::string name = FreshName();
  std::vector<ProcessOutcome> outcomes = RunRanksAsProcesses(
      ranks,
      [&](int rank) -> absl::Status {
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store, FileStore::Open(dir.path()));
        return RunRank(*store, name, kind, rank, ranks, body, options);
      },
      timeout);
  for (const ProcessOutcome& outcome : outcomes) {
    if (!outcome.ok()) return InternalError(outcome.Describe());
  }
  return absl::OkStatus();
}

}  // namespace chorus::testing
