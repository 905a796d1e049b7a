#include "process_group_chorus.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <stdexcept>
#include <utility>

namespace chorus_torch {
namespace {

// How long the completion thread waits on the oldest operation before it looks at the others
// (an operation completes in order of start mostly, but point-to-point ones need not).
constexpr double kPollSeconds = 0.0005;

template <typename T>
T OrThrow(chorus::StatusOr<T> value, const char* what) {
  if (!value.ok()) {
    throw std::runtime_error(std::string("chorus: ") + what + ": " + value.status().ToString());
  }
  return std::move(value).value();
}

chorus::DataType ChorusType(const at::Tensor& tensor) {
  switch (tensor.scalar_type()) {
    case at::kChar:
      return chorus::DataType::kInt8;
    case at::kByte:
      return chorus::DataType::kUint8;
    case at::kShort:
      return chorus::DataType::kInt16;
    case at::kInt:
      return chorus::DataType::kInt32;
    case at::kLong:
      return chorus::DataType::kInt64;
    case at::kHalf:
      return chorus::DataType::kFloat16;
    case at::kBFloat16:
      return chorus::DataType::kBFloat16;
    case at::kFloat:
      return chorus::DataType::kFloat32;
    case at::kDouble:
      return chorus::DataType::kFloat64;
    default:
      TORCH_CHECK(false, "chorus: tensors of type ", tensor.scalar_type(),
                  " are not supported (integers, float16, bfloat16, float32, float64 are)");
  }
}

chorus::ReduceOp ChorusOp(const c10d::ReduceOp& op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return chorus::ReduceOp::kSum;
    case c10d::ReduceOp::PRODUCT:
      return chorus::ReduceOp::kProd;
    case c10d::ReduceOp::MIN:
      return chorus::ReduceOp::kMin;
    case c10d::ReduceOp::MAX:
      return chorus::ReduceOp::kMax;
    case c10d::ReduceOp::AVG:
      return chorus::ReduceOp::kAvg;
    default:
      TORCH_CHECK(false, "chorus: reduce op ", static_cast<int>(op),
                  " is not supported (sum, product, min, max, avg are)");
  }
}

// The one tensor of an argument list, checked: on the CPU and contiguous.
at::Tensor& Single(std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "chorus: ", what, " takes one tensor per process, not ",
              tensors.size());
  at::Tensor& tensor = tensors[0];
  TORCH_CHECK(tensor.device().is_cpu(), "chorus: ", what, " takes CPU tensors, not ",
              tensor.device());
  TORCH_CHECK(tensor.is_contiguous(), "chorus: ", what, " takes contiguous tensors");
  return tensor;
}

void CheckCpuContiguous(const at::Tensor& tensor, const char* what) {
  TORCH_CHECK(tensor.device().is_cpu() && tensor.is_contiguous(), "chorus: ", what,
              " takes contiguous CPU tensors");
}

std::vector<at::Tensor>& SingleList(std::vector<std::vector<at::Tensor>>& lists, int size,
                                    const char* what) {
  TORCH_CHECK(lists.size() == 1, "chorus: ", what, " takes one tensor list per process");
  TORCH_CHECK(static_cast<int>(lists[0].size()) == size, "chorus: ", what, " takes ", size,
              " tensors (one per rank), not ", lists[0].size());
  return lists[0];
}

// Copies consecutive blocks of `flat` into `targets`, in order: how results gathered into one
// buffer reach the caller's list of tensors.
std::function<void()> CopyBlocksOut(at::Tensor flat, std::vector<at::Tensor> targets) {
  return [flat, targets]() mutable {
    int64_t offset = 0;
    for (at::Tensor& target : targets) {
      target.view({-1}).copy_(flat.narrow(0, offset, target.numel()));
      offset += target.numel();
    }
  };
}

std::string NextGroupName() {
  // Every rank creates its process groups in the same order (torch.distributed requires it),
  // so the n-th group has the same name on every rank.
  static std::atomic<int> groups{0};
  return "torch-process-group-" + std::to_string(groups++);
}

chorus::CommunicatorOptions CommunicatorOptionsFor(std::chrono::milliseconds timeout) {
  chorus::CommunicatorOptions options;
  options.timeout_seconds = std::chrono::duration<double>(timeout).count();
  return options;
}

}  // namespace

ChorusWork::ChorusWork(int rank, c10d::OpType type, chorus::Work work,
                       std::vector<at::Tensor> keep_alive, std::vector<at::Tensor> results,
                       std::function<void()> on_success)
    : c10d::Work(rank, type),
      work_(std::move(work)),
      keep_alive_(std::move(keep_alive)),
      results_(std::move(results)),
      on_success_(std::move(on_success)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {}

bool ChorusWork::isCompleted() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool ChorusWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

bool ChorusWork::Poll(double timeout_seconds) {
  if (!work_.Test() && timeout_seconds > 0) work_.Wait(timeout_seconds);
  if (!work_.Test()) return false;
  const chorus::Status status = work_.Wait();
  std::exception_ptr error;
  if (status.ok()) {
    try {
      if (on_success_) on_success_();
    } catch (...) {
      error = std::current_exception();
    }
  } else {
    error = std::make_exception_ptr(std::runtime_error("chorus: " + status.ToString()));
  }
  keep_alive_.clear();
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(results_));
  }
  finish(error);
  return true;
}

ProcessGroupChorus::ProcessGroupChorus(int rank, int size, std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size),
      store_(OrThrow(chorus::Store::Open(""), "opening the store (CHORUS_STORE, or MASTER_ADDR "
                                              "and MASTER_PORT)")),
      device_(OrThrow(chorus::Device::Create(), "creating the device (CHORUS_TRANSPORT)")),
      comm_(OrThrow(chorus::Communicator::Create(store_, NextGroupName(), device_, rank, size,
                                                 CommunicatorOptionsFor(timeout)),
                    "creating the communicator")) {
  completer_ = std::thread([this] { CompleteLoop(); });
}

ProcessGroupChorus::~ProcessGroupChorus() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  completer_.join();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::Track(c10::intrusive_ptr<ChorusWork> work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(work);
  }
  wake_.notify_one();
  return work;
}

void ProcessGroupChorus::CompleteLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
    // On stopping, operations still pending are seen through: they use torch's tensors, so
    // they finish (or fail at their deadline) before the communicator goes.
    if (pending_.empty()) return;
    std::deque<c10::intrusive_ptr<ChorusWork>> works = pending_;
    lock.unlock();
    std::vector<ChorusWork*> done;
    for (size_t i = 0; i < works.size(); ++i) {
      if (works[i]->Poll(i == 0 ? kPollSeconds : 0)) done.push_back(works[i].get());
    }
    lock.lock();
    for (ChorusWork* finished : done) {
      for (auto it = pending_.begin(); it != pending_.end(); ++it) {
        if (it->get() == finished) {
          pending_.erase(it);
          break;
        }
      }
    }
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  at::Tensor& tensor = Single(tensors, "broadcast");
  chorus::Work work = comm_.BroadcastAsync(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                                           ChorusType(tensor), static_cast<int>(opts.rootRank));
  return Track(c10::make_intrusive<ChorusWork>(getRank(), c10d::OpType::BROADCAST,
                                               std::move(work), tensors, tensors, nullptr));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  at::Tensor& tensor = Single(tensors, "allreduce");
  chorus::Work work = comm_.AllReduceAsync(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                                           ChorusType(tensor), ChorusOp(opts.reduceOp));
  return Track(c10::make_intrusive<ChorusWork>(getRank(), c10d::OpType::ALLREDUCE,
                                               std::move(work), tensors, tensors, nullptr));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  at::Tensor& tensor = Single(tensors, "reduce");
  chorus::Work work =
      comm_.ReduceAsync(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), ChorusType(tensor),
                        ChorusOp(opts.reduceOp), static_cast<int>(opts.rootRank));
  return Track(c10::make_intrusive<ChorusWork>(getRank(), c10d::OpType::REDUCE, std::move(work),
                                               tensors, tensors, nullptr));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  at::Tensor& input = Single(inputs, "allgather");
  std::vector<at::Tensor>& targets = SingleList(outputs, getSize(), "allgather");
  for (const at::Tensor& target : targets) {
    TORCH_CHECK(target.numel() == input.numel() && target.scalar_type() == input.scalar_type(),
                "chorus: allgather's outputs must match its input in size and type");
  }
  // Gathered into one buffer, then copied into the caller's tensors once complete.
  at::Tensor flat = at::empty({getSize() * input.numel()}, input.options());
  chorus::Work work = comm_.AllGatherAsync(input.data_ptr(), flat.data_ptr(), input.numel(),
                                           ChorusType(input));
  return Track(c10::make_intrusive<ChorusWork>(
      getRank(), c10d::OpType::ALLGATHER, std::move(work), std::vector<at::Tensor>{input, flat},
      targets, CopyBlocksOut(flat, targets)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_allgather_base(at::Tensor& output,
                                                                   at::Tensor& input,
                                                                   const c10d::AllgatherOptions&) {
  CheckCpuContiguous(output, "all_gather_into_tensor");
  CheckCpuContiguous(input, "all_gather_into_tensor");
  TORCH_CHECK(output.numel() == getSize() * input.numel(),
              "chorus: all_gather_into_tensor's output must hold size x input elements");
  chorus::Work work = comm_.AllGatherAsync(input.data_ptr(), output.data_ptr(), input.numel(),
                                           ChorusType(input));
  return Track(c10::make_intrusive<ChorusWork>(getRank(), c10d::OpType::_ALLGATHER_BASE,
                                               std::move(work),
                                               std::vector<at::Tensor>{input, output},
                                               std::vector<at::Tensor>{output}, nullptr));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  at::Tensor& input = Single(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor flat;
  std::vector<at::Tensor> results;
  if (getRank() == root) {
    results = SingleList(outputs, getSize(), "gather");
    flat = at::empty({getSize() * input.numel()}, input.options());
  }
  chorus::Work work =
      comm_.GatherAsync(input.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr,
                        input.numel(), ChorusType(input), root);
  return Track(c10::make_intrusive<ChorusWork>(
      getRank(), c10d::OpType::GATHER, std::move(work), std::vector<at::Tensor>{input, flat},
      results, flat.defined() ? CopyBlocksOut(flat, results) : nullptr));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  at::Tensor& output = Single(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor flat;
  if (getRank() == root) {
    flat = at::cat(SingleList(inputs, getSize(), "scatter")).view({-1});
  }
  chorus::Work work =
      comm_.ScatterAsync(flat.defined() ? flat.data_ptr() : nullptr, output.data_ptr(),
                         output.numel(), ChorusType(output), root);
  return Track(c10::make_intrusive<ChorusWork>(getRank(), c10d::OpType::SCATTER, std::move(work),
                                               std::vector<at::Tensor>{output, flat}, outputs,
                                               nullptr));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  at::Tensor& output = Single(outputs, "reduce_scatter");
  at::Tensor flat = at::cat(SingleList(inputs, getSize(), "reduce_scatter")).view({-1});
  TORCH_CHECK(flat.numel() == getSize() * output.numel(),
              "chorus: reduce_scatter's inputs must each match its output");
  chorus::Work work = comm_.ReduceScatterAsync(flat.data_ptr(), output.data_ptr(), output.numel(),
                                               ChorusType(output), ChorusOp(opts.reduceOp));
  return Track(c10::make_intrusive<ChorusWork>(getRank(), c10d::OpType::REDUCE_SCATTER,
                                               std::move(work),
                                               std::vector<at::Tensor>{output, flat}, outputs,
                                               nullptr));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  CheckCpuContiguous(output, "reduce_scatter_tensor");
  CheckCpuContiguous(input, "reduce_scatter_tensor");
  TORCH_CHECK(input.numel() == getSize() * output.numel(),
              "chorus: reduce_scatter_tensor's input must hold size x output elements");
  chorus::Work work = comm_.ReduceScatterAsync(input.data_ptr(), output.data_ptr(), output.numel(),
                                               ChorusType(output), ChorusOp(opts.reduceOp));
  return Track(c10::make_intrusive<ChorusWork>(getRank(), c10d::OpType::_REDUCE_SCATTER_BASE,
                                               std::move(work),
                                               std::vector<at::Tensor>{input, output},
                                               std::vector<at::Tensor>{output}, nullptr));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions&) {
  CheckCpuContiguous(output, "all_to_all_single");
  CheckCpuContiguous(input, "all_to_all_single");
  const int size = getSize();
  if (output_split_sizes.empty() && input_split_sizes.empty()) {
    TORCH_CHECK(input.numel() == output.numel() && input.numel() % size == 0,
                "chorus: all_to_all_single without splits needs equal input and output sizes "
                "divisible by the group size");
  }
  // Splits count rows of the first dimension; Chorus counts elements.
  auto elements = [size](const at::Tensor& tensor, const std::vector<int64_t>& splits,
                         std::vector<size_t>* counts, std::vector<size_t>* displs) {
    const int64_t rows = tensor.dim() > 0 ? tensor.size(0) : 1;
    const int64_t row = rows > 0 ? tensor.numel() / rows : 0;
    size_t offset = 0;
    for (int r = 0; r < size; ++r) {
      const int64_t count = (splits.empty() ? rows / size : splits[r]) * row;
      counts->push_back(static_cast<size_t>(count));
      displs->push_back(offset);
      offset += static_cast<size_t>(count);
    }
  };
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
  elements(input, input_split_sizes, &send_counts, &send_displs);
  elements(output, output_split_sizes, &recv_counts, &recv_displs);
  chorus::Work work = comm_.AllToAllVAsync(input.data_ptr(), send_counts, send_displs,
                                           output.data_ptr(), recv_counts, recv_displs,
                                           ChorusType(input));
  return Track(c10::make_intrusive<ChorusWork>(getRank(), c10d::OpType::ALLTOALL_BASE,
                                               std::move(work),
                                               std::vector<at::Tensor>{input, output},
                                               std::vector<at::Tensor>{output}, nullptr));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == getSize() &&
                  static_cast<int>(outputs.size()) == getSize(),
              "chorus: all_to_all takes one input and one output tensor per rank");
  at::Tensor input = at::cat(inputs).view({-1});
  std::vector<int64_t> input_splits, output_splits;
  int64_t output_elements = 0;
  for (int r = 0; r < getSize(); ++r) {
    input_splits.push_back(inputs[r].numel());
    output_splits.push_back(outputs[r].numel());
    output_elements += outputs[r].numel();
  }
  at::Tensor output = at::empty({output_elements}, outputs[0].options());
  c10::intrusive_ptr<c10d::Work> flat =
      alltoall_base(output, input, output_splits, input_splits, opts);
  // Copy out once complete: wait here (all_to_all of lists is not on a hot path).
  flat->wait();
  CopyBlocksOut(output, outputs)();
  return flat;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::barrier(const c10d::BarrierOptions&) {
  chorus::Work work = comm_.BarrierAsync();
  return Track(c10::make_intrusive<ChorusWork>(getRank(), c10d::OpType::BARRIER, std::move(work),
                                               std::vector<at::Tensor>{},
                                               std::vector<at::Tensor>{}, nullptr));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::send(std::vector<at::Tensor>& tensors,
                                                        int dst_rank, int tag) {
  at::Tensor& tensor = Single(tensors, "send");
  chorus::Work work = comm_.SendAsync(tensor.data_ptr(), tensor.numel(), ChorusType(tensor),
                                      dst_rank, static_cast<uint32_t>(tag));
  return Track(c10::make_intrusive<ChorusWork>(getRank(), c10d::OpType::SEND, std::move(work),
                                               tensors, std::vector<at::Tensor>{}, nullptr));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recv(std::vector<at::Tensor>& tensors,
                                                        int src_rank, int tag) {
  at::Tensor& tensor = Single(tensors, "recv");
  chorus::Work work = comm_.RecvAsync(tensor.data_ptr(), tensor.numel(), ChorusType(tensor),
                                      src_rank, static_cast<uint32_t>(tag));
  return Track(c10::make_intrusive<ChorusWork>(getRank(), c10d::OpType::RECV, std::move(work),
                                               tensors, tensors, nullptr));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                 int tag) {
  at::Tensor& tensor = Single(tensors, "recv");
  std::vector<int> peers;
  for (int r = 0; r < getSize(); ++r) {
    if (r != getRank()) peers.push_back(r);
  }
  chorus::Work work = comm_.RecvFromAnyAsync(tensor.data_ptr(), tensor.numel(),
                                             ChorusType(tensor), peers,
                                             static_cast<uint32_t>(tag));
  return Track(c10::make_intrusive<ChorusWork>(getRank(), c10d::OpType::RECVANYSOURCE,
                                               std::move(work), tensors, tensors, nullptr));
}

}  // namespace chorus_torch
