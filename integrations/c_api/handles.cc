#include "chorus/integrations/c_api/handles.h"

#include <cstddef>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "chorus/core/status.h"

namespace chorus::c_api {
namespace {

// The public error codes are the internal error kinds; these pin the correspondence.
static_assert(CHORUS_OK == static_cast<int>(ErrorKind::kOk));
static_assert(CHORUS_ERR_DEADLINE_EXCEEDED == static_cast<int>(ErrorKind::kDeadlineExceeded));
static_assert(CHORUS_ERR_PEER_UNAVAILABLE == static_cast<int>(ErrorKind::kPeerUnavailable));
static_assert(CHORUS_ERR_INVALID_ARGUMENT == static_cast<int>(ErrorKind::kInvalidArgument));
static_assert(CHORUS_ERR_ABORTED == static_cast<int>(ErrorKind::kAborted));
static_assert(CHORUS_ERR_MISMATCH == static_cast<int>(ErrorKind::kMismatch));
static_assert(CHORUS_ERR_INTERNAL == static_cast<int>(ErrorKind::kInternal));
// The public type and operator values are the wire values of core/types.h.
static_assert(CHORUS_INT8 == static_cast<int>(DataType::kInt8));
static_assert(CHORUS_UINT8 == static_cast<int>(DataType::kUint8));
static_assert(CHORUS_INT32 == static_cast<int>(DataType::kInt32));
static_assert(CHORUS_UINT32 == static_cast<int>(DataType::kUint32));
static_assert(CHORUS_INT64 == static_cast<int>(DataType::kInt64));
static_assert(CHORUS_UINT64 == static_cast<int>(DataType::kUint64));
static_assert(CHORUS_FLOAT16 == static_cast<int>(DataType::kFloat16));
static_assert(CHORUS_BFLOAT16 == static_cast<int>(DataType::kBFloat16));
static_assert(CHORUS_FLOAT32 == static_cast<int>(DataType::kFloat32));
static_assert(CHORUS_FLOAT64 == static_cast<int>(DataType::kFloat64));
static_assert(CHORUS_INT16 == static_cast<int>(DataType::kInt16));
static_assert(CHORUS_UINT16 == static_cast<int>(DataType::kUint16));
static_assert(CHORUS_UINT16 + 1 == kNumDataTypes);
static_assert(CHORUS_SUM == static_cast<int>(ReduceOp::kSum));
static_assert(CHORUS_PROD == static_cast<int>(ReduceOp::kProd));
static_assert(CHORUS_MIN == static_cast<int>(ReduceOp::kMin));
static_assert(CHORUS_MAX == static_cast<int>(ReduceOp::kMax));
static_assert(CHORUS_AVG == static_cast<int>(ReduceOp::kAvg));
static_assert(CHORUS_AVG + 1 == kNumReduceOps);

struct LastError {
  std::string message;
  int peer = -1;
};
thread_local LastError last_error;

// True when the caller's struct is recent enough to hold `field` (its struct_size covers it):
// a program built against older headers passes a shorter struct.
#define CHORUS_C_HAS_FIELD(ptr, type, field) \
  ((ptr)->struct_size >= offsetof(type, field) + sizeof((ptr)->field))

absl::StatusOr<absl::Duration> ToDuration(double seconds, const char* what) {
  if (!(seconds >= 0)) return InvalidArgumentError(absl::StrCat(what, " must be >= 0"));
  return absl::Seconds(seconds);
}

}  // namespace

chorus_error_t Report(const absl::Status& status) {
  if (status.ok()) return CHORUS_OK;
  last_error.message = std::string(status.message());
  last_error.peer = ErrorPeerRank(status).value_or(-1);
  return static_cast<chorus_error_t>(GetErrorKind(status));
}

absl::Status NullArgument(const char* what) {
  return InvalidArgumentError(absl::StrCat(what, " is null"));
}

absl::StatusOr<DataType> ToDataType(chorus_datatype_t type) {
  const int value = type;
  if (value < 0 || value >= kNumDataTypes) {
    return InvalidArgumentError(absl::StrCat("unknown chorus_datatype_t ", value));
  }
  return static_cast<DataType>(value);
}

absl::StatusOr<ReduceOp> ToReduceOp(chorus_reduce_op_t op) {
  const int value = op;
  if (value < 0 || value >= kNumReduceOps) {
    return InvalidArgumentError(absl::StrCat("unknown chorus_reduce_op_t ", value));
  }
  return static_cast<ReduceOp>(value);
}

absl::StatusOr<CollectiveOptions> ToCallOptions(const chorus_call_options_t* options) {
  CollectiveOptions result;
  if (options == nullptr) return result;
  using T = chorus_call_options_t;
  if (CHORUS_C_HAS_FIELD(options, T, timeout_seconds) && options->timeout_seconds != 0) {
    CHORUS_ASSIGN_OR_RETURN(result.timeout, ToDuration(options->timeout_seconds, "timeout"));
  }
  if (CHORUS_C_HAS_FIELD(options, T, algorithm) && options->algorithm != nullptr) {
    result.algorithm = options->algorithm;
  }
  if (CHORUS_C_HAS_FIELD(options, T, memory)) {
    switch (options->memory) {
      case CHORUS_MEMORY_AUTO:
        result.memory = MemoryPlacement::kAuto;
        break;
      case CHORUS_MEMORY_HOST:
        result.memory = MemoryPlacement::kHost;
        break;
      case CHORUS_MEMORY_CUDA:
        result.memory = MemoryPlacement::kCuda;
        break;
      default:
        return InvalidArgumentError(
            absl::StrCat("unknown chorus_memory_t ", static_cast<int>(options->memory)));
    }
  }
  if (CHORUS_C_HAS_FIELD(options, T, cuda_stream)) result.cuda_stream = options->cuda_stream;
  return result;
}

absl::StatusOr<CommunicatorOptions> ToCommOptions(const chorus_comm_options_t* options) {
  CommunicatorOptions result;
  if (options == nullptr) return result;
  using T = chorus_comm_options_t;
  if (CHORUS_C_HAS_FIELD(options, T, timeout_seconds) && options->timeout_seconds != 0) {
    CHORUS_ASSIGN_OR_RETURN(result.timeout, ToDuration(options->timeout_seconds, "timeout"));
  }
  if (CHORUS_C_HAS_FIELD(options, T, connect_timeout_seconds) &&
      options->connect_timeout_seconds != 0) {
    CHORUS_ASSIGN_OR_RETURN(result.connect_timeout,
                            ToDuration(options->connect_timeout_seconds, "connect timeout"));
  }
  if (CHORUS_C_HAS_FIELD(options, T, worker_threads) && options->worker_threads != 0) {
    result.worker_threads = options->worker_threads;
  }
  if (CHORUS_C_HAS_FIELD(options, T, algorithm_rules) && options->algorithm_rules != nullptr) {
    result.algorithm_rules = options->algorithm_rules;
  }
  return result;
}

absl::Span<const size_t> PerRank(const Communicator& comm, const size_t* values) {
  if (values == nullptr) return {};
  return absl::Span<const size_t>(values, static_cast<size_t>(comm.size()));
}

}  // namespace chorus::c_api

extern "C" {

const char* chorus_last_error(void) { return chorus::c_api::last_error.message.c_str(); }

int chorus_last_error_peer(void) { return chorus::c_api::last_error.peer; }

const char* chorus_error_name(chorus_error_t error) {
  const int value = error;
  if (value < CHORUS_OK || value > CHORUS_ERR_INTERNAL) return "unknown";
  // A string_view of a literal: NUL-terminated.
  return chorus::ErrorKindName(static_cast<chorus::ErrorKind>(value)).data();
}

}  // extern "C"
