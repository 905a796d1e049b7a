// The C API's handles: version, stores, devices, communicators (created, split, grouped,
// shrunk) and work.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "chorus/chorus_c.h"
#include "chorus/core/status.h"
#include "chorus/integrations/c_api/handles.h"
#include "chorus/rendezvous/store_url.h"
#include "chorus/transport/device_from_env.h"
#include "chorus/transport/tcp/tcp_options.h"

using chorus::c_api::Guard;
using chorus::c_api::NullArgument;

namespace {

static_assert(CHORUS_NO_COLOR == chorus::Communicator::kNoColor);

// Stores a communicator just made in a new handle at `*comm`; none (a rank that a split leaves
// out) leaves it NULL.
absl::Status Adopt(absl::StatusOr<std::unique_ptr<chorus::Communicator>> made,
                   chorus_comm_t** comm) {
  CHORUS_RETURN_IF_ERROR(made.status());
  if (*made != nullptr) *comm = new chorus_comm{*std::move(made)};
  return absl::OkStatus();
}

// The `count` ranks at `ranks`, which may be NULL only when there are none.
absl::StatusOr<absl::Span<const int>> RankList(const int* ranks, size_t count, const char* what) {
  if (ranks == nullptr && count > 0) return NullArgument(what);
  return absl::MakeConstSpan(ranks, count);
}

}  // namespace

extern "C" {

int chorus_version(void) { return CHORUS_VERSION_CODE; }

const char* chorus_version_string(void) { return CHORUS_VERSION_STRING; }

size_t chorus_datatype_size(chorus_datatype_t type) {
  auto internal = chorus::c_api::ToDataType(type);
  return internal.ok() ? chorus::DataTypeSize(*internal) : 0;
}

chorus_error_t chorus_store_open(const char* url, chorus_store_t** store) {
  return Guard([&]() -> absl::Status {
    if (store == nullptr) return NullArgument("store");
    *store = nullptr;
    std::unique_ptr<chorus::Store> opened;
    if (url == nullptr || *url == '\0') {
      CHORUS_ASSIGN_OR_RETURN(opened, chorus::OpenStoreFromEnvironment());
    } else {
      CHORUS_ASSIGN_OR_RETURN(opened, chorus::OpenStore(url));
    }
    *store = new chorus_store{std::move(opened)};
    return absl::OkStatus();
  });
}

void chorus_store_destroy(chorus_store_t* store) { delete store; }

chorus_error_t chorus_device_create(const char* transport, chorus_device_t** device) {
  return Guard([&]() -> absl::Status {
    if (device == nullptr) return NullArgument("device");
    *device = nullptr;
    std::unique_ptr<chorus::Device> created;
    if (transport == nullptr || *transport == '\0') {
      CHORUS_ASSIGN_OR_RETURN(created, chorus::CreateDeviceFromEnv());
    } else {
      CHORUS_ASSIGN_OR_RETURN(auto tcp_options, chorus::tcp::TcpDeviceOptions::FromEnv());
      CHORUS_ASSIGN_OR_RETURN(created, chorus::CreateDeviceByName(transport, tcp_options));
    }
    *device = new chorus_device{std::move(created)};
    return absl::OkStatus();
  });
}

void chorus_device_destroy(chorus_device_t* device) { delete device; }

chorus_error_t chorus_comm_create(chorus_store_t* store, const char* name, chorus_device_t* device,
                                  int rank, int size, const chorus_comm_options_t* options,
                                  chorus_comm_t** comm) {
  return Guard([&]() -> absl::Status {
    if (comm == nullptr) return NullArgument("comm");
    *comm = nullptr;
    if (store == nullptr) return NullArgument("store");
    if (device == nullptr) return NullArgument("device");
    if (name == nullptr) return NullArgument("name");
    CHORUS_ASSIGN_OR_RETURN(auto comm_options, chorus::c_api::ToCommOptions(options));
    return Adopt(
        chorus::Communicator::Create(*store->impl, name, *device->impl, rank, size, comm_options),
        comm);
  });
}

chorus_error_t chorus_comm_split(chorus_comm_t* comm, int color, int key,
                                 chorus_comm_t** new_comm) {
  return Guard([&]() -> absl::Status {
    if (new_comm == nullptr) return NullArgument("new_comm");
    *new_comm = nullptr;
    if (comm == nullptr) return NullArgument("comm");
    return Adopt(comm->impl->Split(color, key), new_comm);
  });
}

chorus_error_t chorus_comm_create_group(chorus_comm_t* comm, const int* ranks, size_t num_ranks,
                                        chorus_comm_t** new_comm) {
  return Guard([&]() -> absl::Status {
    if (new_comm == nullptr) return NullArgument("new_comm");
    *new_comm = nullptr;
    if (comm == nullptr) return NullArgument("comm");
    CHORUS_ASSIGN_OR_RETURN(auto members, RankList(ranks, num_ranks, "ranks"));
    return Adopt(comm->impl->CreateGroup(members), new_comm);
  });
}

chorus_error_t chorus_comm_shrink(chorus_comm_t* comm, const int* excluded, size_t num_excluded,
                                  chorus_comm_t** new_comm) {
  return Guard([&]() -> absl::Status {
    if (new_comm == nullptr) return NullArgument("new_comm");
    *new_comm = nullptr;
    if (comm == nullptr) return NullArgument("comm");
    CHORUS_ASSIGN_OR_RETURN(auto gone, RankList(excluded, num_excluded, "excluded"));
    return Adopt(comm->impl->Shrink(gone), new_comm);
  });
}

void chorus_comm_destroy(chorus_comm_t* comm) { delete comm; }

int chorus_comm_rank(const chorus_comm_t* comm) { return comm ? comm->impl->rank() : -1; }

int chorus_comm_size(const chorus_comm_t* comm) { return comm ? comm->impl->size() : 0; }

void chorus_comm_abort(chorus_comm_t* comm, const char* reason) {
  if (comm != nullptr) comm->impl->Abort(reason != nullptr ? reason : "chorus_comm_abort");
}

size_t chorus_comm_flight_recorder_dump(const chorus_comm_t* comm, char* buffer, size_t capacity) {
  std::string dump;
  try {
    if (comm != nullptr) dump = comm->impl->FlightRecorderDump();
  } catch (...) {
    // Allocation failure: an empty dump, as for a null communicator.
  }
  if (buffer != nullptr && capacity > 0) {
    const size_t copied = std::min(dump.size(), capacity - 1);
    std::memcpy(buffer, dump.data(), copied);
    buffer[copied] = '\0';
  }
  return dump.size();
}

chorus_error_t chorus_work_wait(chorus_work_t* work, double timeout_seconds) {
  return Guard([&]() -> absl::Status {
    if (work == nullptr) return NullArgument("work");
    return work->impl->Wait(timeout_seconds < 0 ? absl::InfiniteDuration()
                                                : absl::Seconds(timeout_seconds));
  });
}

int chorus_work_test(const chorus_work_t* work) { return work && work->impl->Test() ? 1 : 0; }

void chorus_work_abort(chorus_work_t* work) {
  if (work != nullptr) work->impl->Abort();
}

int chorus_work_peer(const chorus_work_t* work) { return work ? work->impl->peer() : -1; }

void chorus_work_destroy(chorus_work_t* work) {
  if (work == nullptr) return;
  if (!work->impl->Test()) {
    work->impl->Abort();
    // The outcome (kAborted) is of no interest: the caller gave up the handle.
    work->impl->Wait().IgnoreError();
  }
  delete work;
}

}  // extern "C"
