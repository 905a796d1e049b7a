// TensorFlow ops over one Chorus communicator per process (chorus_tf/__init__.py wraps them):
// ChorusAllreduce, ChorusBroadcast, ChorusAllgather (first dimensions may differ per rank),
// ChorusReduceScatter, ChorusAlltoall, ChorusBarrier, and ChorusRank / ChorusSize. The
// collectives are AsyncOpKernels: each starts a Chorus asynchronous operation and returns;
// a completion thread calls `done` when the data is in place, so no TensorFlow thread waits.
//
// The communicator is created on first use from the environment: Chorus's store (CHORUS_STORE,
// else MASTER_ADDR:MASTER_PORT+1), the rank and size (CHORUS_RANK/CHORUS_SIZE, RANK/WORLD_SIZE
// or Slurm's) and the device (CHORUS_TRANSPORT). Collectives are issued under one lock, in the
// order the kernels start, so two collectives of one kernel are never split by another's. An op
// given a name by its caller carries the name's hash (attr `key`), checked across the ranks
// before the op's collective (CheckKey).
#include <chorus/chorus.h>

#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace chorus_tf {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::DataType;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

template <typename... Args>
absl::Status Unavailable(const Args&... parts) {
  return absl::UnavailableError(absl::StrCat(parts...));
}
template <typename... Args>
absl::Status InvalidArgument(const Args&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(parts...));
}

// The rank and size from the environment, in the order chorus's launcher, torchrun and Slurm
// set them.
int EnvInt(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return -1;
}

// One started operation: its Chorus Work, what to do once it succeeded, and TensorFlow's
// `done`. `then` may start the next operation of the same kernel and return it.
struct Pending {
  chorus::Work work;
  OpKernelContext* context;
  std::function<void()> then;
  AsyncOpKernel::DoneCallback done;
};

class Context {
 public:
  static Context& Get() {
    static Context* context = new Context();  // lives as long as the process
    return *context;
  }

  // The communicator, created on first use; an error status (for the op) if it cannot be.
  chorus::Communicator* Communicator(absl::Status* status) {
    std::call_once(created_, [this] { Create(); });
    if (comm_ == nullptr) *status = Unavailable(error_);
    return comm_.get();
  }

  std::mutex& issue_mu() { return issue_mu_; }

  // Hands a started operation to the completion thread.
  void Track(Pending pending) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(std::make_shared<Pending>(std::move(pending)));
    }
    wake_.notify_one();
  }

 private:
  void Create() {
    const int rank = EnvInt({"CHORUS_RANK", "RANK", "SLURM_PROCID"});
    const int size = EnvInt({"CHORUS_SIZE", "WORLD_SIZE", "SLURM_NTASKS"});
    if (rank < 0 || size < 1) {
      error_ = "chorus: set CHORUS_RANK and CHORUS_SIZE (or RANK and WORLD_SIZE) for each process";
      return;
    }
    auto store = chorus::Store::Open("");
    if (!store.ok()) {
      error_ = "chorus: opening the store: " + store.status().ToString();
      return;
    }
    store_ = std::make_unique<chorus::Store>(std::move(store).value());
    auto device = chorus::Device::Create();
    if (!device.ok()) {
      error_ = "chorus: creating the device: " + device.status().ToString();
      return;
    }
    device_ = std::make_unique<chorus::Device>(std::move(device).value());
    auto comm = chorus::Communicator::Create(*store_, "tensorflow", *device_, rank, size);
    if (!comm.ok()) {
      error_ = "chorus: creating the communicator: " + comm.status().ToString();
      return;
    }
    comm_ = std::make_unique<chorus::Communicator>(std::move(comm).value());
    std::thread([this] { CompleteLoop(); }).detach();
  }

  void CompleteLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      wake_.wait(lock, [this] { return !pending_.empty(); });
      std::deque<std::shared_ptr<Pending>> works = pending_;
      lock.unlock();
      std::vector<Pending*> finished;
      for (size_t i = 0; i < works.size(); ++i) {
        Pending& pending = *works[i];
        // The oldest is waited on briefly; the others are only looked at.
        if (!pending.work.Test() && i == 0) pending.work.Wait(0.0005);
        if (!pending.work.Test()) continue;
        const chorus::Status status = pending.work.Wait();
        if (status.ok()) {
          if (pending.then) pending.then();
        } else {
          pending.context->SetStatus(
              Unavailable("chorus: ", status.ToString()));
        }
        finished.push_back(&pending);
      }
      lock.lock();
      for (Pending* done : finished) {
        for (auto it = pending_.begin(); it != pending_.end(); ++it) {
          if (it->get() == done) {
            auto callback = std::move((*it)->done);
            pending_.erase(it);
            lock.unlock();
            callback();
            lock.lock();
            break;
          }
        }
      }
    }
  }

  std::once_flag created_;
  std::string error_;
  std::unique_ptr<chorus::Store> store_;
  std::unique_ptr<chorus::Device> device_;
  std::unique_ptr<chorus::Communicator> comm_;
  std::mutex issue_mu_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Pending>> pending_;
};

bool ChorusType(DataType type, chorus::DataType* out) {
  switch (type) {
    case tensorflow::DT_INT8: *out = chorus::DataType::kInt8; return true;
    case tensorflow::DT_UINT8: *out = chorus::DataType::kUint8; return true;
    case tensorflow::DT_INT16: *out = chorus::DataType::kInt16; return true;
    case tensorflow::DT_UINT16: *out = chorus::DataType::kUint16; return true;
    case tensorflow::DT_INT32: *out = chorus::DataType::kInt32; return true;
    case tensorflow::DT_UINT32: *out = chorus::DataType::kUint32; return true;
    case tensorflow::DT_INT64: *out = chorus::DataType::kInt64; return true;
    case tensorflow::DT_UINT64: *out = chorus::DataType::kUint64; return true;
    case tensorflow::DT_HALF: *out = chorus::DataType::kFloat16; return true;
    case tensorflow::DT_BFLOAT16: *out = chorus::DataType::kBFloat16; return true;
    case tensorflow::DT_FLOAT: *out = chorus::DataType::kFloat32; return true;
    case tensorflow::DT_DOUBLE: *out = chorus::DataType::kFloat64; return true;
    default: return false;
  }
}

bool ChorusOp(const std::string& name, chorus::ReduceOp* out) {
  if (name == "sum") *out = chorus::ReduceOp::kSum;
  else if (name == "avg") *out = chorus::ReduceOp::kAvg;
  else if (name == "min") *out = chorus::ReduceOp::kMin;
  else if (name == "max") *out = chorus::ReduceOp::kMax;
  else if (name == "prod") *out = chorus::ReduceOp::kProd;
  else return false;
  return true;
}

// The base of the collective kernels: the communicator, the element type, and Track.
class CollectiveKernel : public AsyncOpKernel {
 public:
  explicit CollectiveKernel(OpKernelConstruction* construction) : AsyncOpKernel(construction) {
    if (construction->HasAttr("key")) {
      OP_REQUIRES_OK(construction, construction->GetAttr("key", &key_));
    }
  }

 protected:
  // With a key (the hash of the name the caller gave the op), checks first that every rank is
  // at the op of that name: one small allreduce of (key, -key) with max. Ranks that issue named
  // collectives in different orders then fail, each naming the op, instead of pairing
  // different tensors. Call with the issue lock held; false (done called) on a mismatch.
  bool CheckKey(OpKernelContext* context, DoneCallback& done, chorus::Communicator* comm) {
    if (key_ == 0) return true;
    const int64_t mine[2] = {key_, -key_};
    int64_t seen[2] = {0, 0};
    const chorus::Status status =
        comm->AllReduce(mine, seen, 2, chorus::DataType::kInt64, chorus::ReduceOp::kMax);
    if (!status.ok()) {
      context->SetStatus(Unavailable("chorus: ", status.ToString()));
    } else if (seen[0] != key_ || seen[1] != -key_) {
      context->SetStatus(InvalidArgument(
          "chorus: collective mismatch: op '", name(), "' met a differently named collective on "
          "another rank; every rank must issue its named collectives in the same order"));
    } else {
      return true;
    }
    done();
    return false;
  }

  // The communicator and the Chorus type of input 0; false (done called) on error.
  bool Prepare(OpKernelContext* context, DoneCallback& done, chorus::Communicator** comm,
               chorus::DataType* type) {
    absl::Status status;
    *comm = Context::Get().Communicator(&status);
    if (*comm == nullptr) {
      context->SetStatus(status);
      done();
      return false;
    }
    if (context->num_inputs() > 0 && !ChorusType(context->input(0).dtype(), type)) {
      context->SetStatus(InvalidArgument(
          "chorus: ", tensorflow::DataTypeString(context->input(0).dtype()),
          " is not supported (integers, half, bfloat16, float, double are)"));
      done();
      return false;
    }
    return true;
  }

  // Tracks `work`, or fails the op at once if it did not start.
  static void Track(OpKernelContext* context, chorus::Work work, std::function<void()> then,
                    DoneCallback done) {
    Context::Get().Track({std::move(work), context, std::move(then), std::move(done)});
  }

  static void* Data(const Tensor& tensor) {
    return const_cast<char*>(tensor.tensor_data().data());
  }

 private:
  int64_t key_ = 0;
};

// The kernels of one collective with one output: the output's shape from the input's, then the
// collective started under the issue lock. Subclasses say which.
class SingleCollectiveKernel : public CollectiveKernel {
 public:
  explicit SingleCollectiveKernel(OpKernelConstruction* construction)
      : CollectiveKernel(construction) {
    if (construction->HasAttr("reduce_op")) {
      std::string op;
      OP_REQUIRES_OK(construction, construction->GetAttr("reduce_op", &op));
      OP_REQUIRES(construction, ChorusOp(op, &op_),
                  InvalidArgument("chorus: reduce_op '", op,
                                  "' is not sum, avg, min, max or prod"));
    }
  }

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    chorus::Communicator* comm;
    chorus::DataType type;
    if (!Prepare(context, done, &comm, &type)) return;
    const Tensor& input = context->input(0);
    TensorShape shape = input.shape();
    const absl::Status shaped = OutputShape(comm->size(), &shape);
    OP_REQUIRES_OK_ASYNC(context, shaped, done);
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(context, context->allocate_output(0, shape, &output), done);
    std::lock_guard<std::mutex> lock(Context::Get().issue_mu());
    if (!CheckKey(context, done, comm)) return;
    Track(context, Start(*comm, input, *output, type), nullptr, std::move(done));
  }

 protected:
  // The output's shape, from the input's in `shape`; an error for an input the op refuses.
  virtual absl::Status OutputShape(int size, TensorShape* shape) { return absl::OkStatus(); }
  virtual chorus::Work Start(chorus::Communicator& comm, const Tensor& input, Tensor& output,
                             chorus::DataType type) = 0;
  // The first dimension split into `size` blocks: the op's shape, or why not.
  static absl::Status Divisible(const char* op, int size, TensorShape* shape) {
    if (shape->dims() >= 1 && shape->dim_size(0) % size == 0) return absl::OkStatus();
    return InvalidArgument("chorus: ", op, " needs a first dimension divisible by ", size);
  }

  chorus::ReduceOp op_ = chorus::ReduceOp::kSum;
};

class AllreduceKernel : public SingleCollectiveKernel {
 public:
  using SingleCollectiveKernel::SingleCollectiveKernel;

 protected:
  chorus::Work Start(chorus::Communicator& comm, const Tensor& input, Tensor& output,
                     chorus::DataType type) override {
    return comm.AllReduceAsync(Data(input), Data(output), input.NumElements(), type, op_);
  }
};

class BroadcastKernel : public SingleCollectiveKernel {
 public:
  explicit BroadcastKernel(OpKernelConstruction* construction)
      : SingleCollectiveKernel(construction) {
    OP_REQUIRES_OK(construction, construction->GetAttr("root", &root_));
  }

 protected:
  chorus::Work Start(chorus::Communicator& comm, const Tensor& input, Tensor& output,
                     chorus::DataType type) override {
    return comm.BroadcastAsync(Data(input), Data(output), input.NumElements(), type, root_);
  }

 private:
  int root_ = 0;
};

class ReduceScatterKernel : public SingleCollectiveKernel {
 public:
  using SingleCollectiveKernel::SingleCollectiveKernel;

 protected:
  absl::Status OutputShape(int size, TensorShape* shape) override {
    absl::Status status = Divisible("reduce_scatter", size, shape);
    if (status.ok()) shape->set_dim(0, shape->dim_size(0) / size);
    return status;
  }
  chorus::Work Start(chorus::Communicator& comm, const Tensor& input, Tensor& output,
                     chorus::DataType type) override {
    return comm.ReduceScatterAsync(Data(input), Data(output), output.NumElements(), type, op_);
  }
};

class AlltoallKernel : public SingleCollectiveKernel {
 public:
  using SingleCollectiveKernel::SingleCollectiveKernel;

 protected:
  absl::Status OutputShape(int size, TensorShape* shape) override {
    return Divisible("alltoall", size, shape);
  }
  chorus::Work Start(chorus::Communicator& comm, const Tensor& input, Tensor& output,
                     chorus::DataType type) override {
    return comm.AllToAllAsync(Data(input), Data(output), input.NumElements() / comm.size(), type);
  }
};

// Rows of the first dimension may differ per rank: the row counts are gathered first, then the
// rows (AllGatherV), both under the issue lock so that they stay adjacent on every rank.
class AllgatherKernel : public CollectiveKernel {
 public:
  using CollectiveKernel::CollectiveKernel;
  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    chorus::Communicator* comm;
    chorus::DataType type;
    if (!Prepare(context, done, &comm, &type)) return;
    const Tensor& input = context->input(0);
    OP_REQUIRES_ASYNC(context, input.dims() >= 1,
                      InvalidArgument("chorus: allgather needs a tensor of "
                                                          "rank 1 or more"),
                      done);
    const int size = comm->size();
    const int64_t row = input.dim_size(0) > 0 ? input.NumElements() / input.dim_size(0)
                                              : input.shape().num_elements();
    std::lock_guard<std::mutex> lock(Context::Get().issue_mu());
    if (!CheckKey(context, done, comm)) return;
    std::vector<int64_t> rows(size);
    int64_t mine = input.dim_size(0);
    const chorus::Status counted =
        comm->AllGather(&mine, rows.data(), 1, chorus::DataType::kInt64);
    OP_REQUIRES_ASYNC(context, counted.ok(),
                      Unavailable("chorus: ", counted.ToString()), done);
    TensorShape shape = input.shape();
    int64_t total = 0;
    std::vector<size_t> counts;
    for (int64_t r : rows) {
      total += r;
      counts.push_back(static_cast<size_t>(r * row));
    }
    shape.set_dim(0, total);
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(context, context->allocate_output(0, shape, &output), done);
    Track(context, comm->AllGatherVAsync(Data(input), Data(*output), counts, type), nullptr,
          std::move(done));
  }
};

class BarrierKernel : public CollectiveKernel {
 public:
  using CollectiveKernel::CollectiveKernel;
  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    chorus::Communicator* comm;
    chorus::DataType type;
    if (!Prepare(context, done, &comm, &type)) return;
    std::lock_guard<std::mutex> lock(Context::Get().issue_mu());
    Track(context, comm->BarrierAsync(), nullptr, std::move(done));
  }
};

// ChorusRank / ChorusSize: int32 scalars; they create the communicator if needed.
template <bool kRank>
class IdentityKernel : public tensorflow::OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* context) override {
    absl::Status status;
    chorus::Communicator* comm = Context::Get().Communicator(&status);
    OP_REQUIRES_OK(context, status);
    Tensor* output = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({}), &output));
    output->scalar<int32_t>()() = kRank ? comm->rank() : comm->size();
  }
};

constexpr char kTypes[] =
    "T: {int8, uint8, int16, uint16, int32, uint32, int64, uint64, half, bfloat16, float, double}";

}  // namespace

using tensorflow::shape_inference::InferenceContext;

// Output shapes: the input's, or the input's with a first dimension known only when it runs.
absl::Status SameShape(InferenceContext* c) {
  c->set_output(0, c->input(0));
  return absl::OkStatus();
}

absl::Status FirstDimensionUnknown(InferenceContext* c) {
  tensorflow::shape_inference::ShapeHandle shape;
  TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(0), 0, c->UnknownDim(), &shape));
  c->set_output(0, shape);
  return absl::OkStatus();
}

REGISTER_OP("ChorusAllreduce")
    .Attr(kTypes)
    .Attr("key: int = 0")
    .Attr("reduce_op: {'sum', 'avg', 'min', 'max', 'prod'} = 'sum'")
    .Input("tensor: T")
    .Output("reduced: T")
    .SetIsStateful()
    .SetShapeFn(SameShape);
REGISTER_KERNEL_BUILDER(Name("ChorusAllreduce").Device(tensorflow::DEVICE_CPU), AllreduceKernel);

REGISTER_OP("ChorusBroadcast")
    .Attr(kTypes)
    .Attr("key: int = 0")
    .Attr("root: int = 0")
    .Input("tensor: T")
    .Output("broadcast: T")
    .SetIsStateful()
    .SetShapeFn(SameShape);
REGISTER_KERNEL_BUILDER(Name("ChorusBroadcast").Device(tensorflow::DEVICE_CPU), BroadcastKernel);

REGISTER_OP("ChorusAllgather")
    .Attr(kTypes)
    .Attr("key: int = 0")
    .Input("tensor: T")
    .Output("gathered: T")
    .SetIsStateful()
    .SetShapeFn(FirstDimensionUnknown);
REGISTER_KERNEL_BUILDER(Name("ChorusAllgather").Device(tensorflow::DEVICE_CPU), AllgatherKernel);

REGISTER_OP("ChorusReduceScatter")
    .Attr(kTypes)
    .Attr("key: int = 0")
    .Attr("reduce_op: {'sum', 'avg', 'min', 'max', 'prod'} = 'sum'")
    .Input("tensor: T")
    .Output("reduced: T")
    .SetIsStateful()
    .SetShapeFn(FirstDimensionUnknown);
REGISTER_KERNEL_BUILDER(Name("ChorusReduceScatter").Device(tensorflow::DEVICE_CPU),
                        ReduceScatterKernel);

REGISTER_OP("ChorusAlltoall")
    .Attr(kTypes)
    .Attr("key: int = 0")
    .Input("tensor: T")
    .Output("exchanged: T")
    .SetIsStateful()
    .SetShapeFn(SameShape);
REGISTER_KERNEL_BUILDER(Name("ChorusAlltoall").Device(tensorflow::DEVICE_CPU), AlltoallKernel);

REGISTER_OP("ChorusBarrier").SetIsStateful().SetShapeFn(tensorflow::shape_inference::NoOutputs);
REGISTER_KERNEL_BUILDER(Name("ChorusBarrier").Device(tensorflow::DEVICE_CPU), BarrierKernel);

REGISTER_OP("ChorusRank").Output("rank: int32").SetIsStateful().SetShapeFn(
    tensorflow::shape_inference::ScalarShape);
REGISTER_KERNEL_BUILDER(Name("ChorusRank").Device(tensorflow::DEVICE_CPU), IdentityKernel<true>);
REGISTER_OP("ChorusSize").Output("size: int32").SetIsStateful().SetShapeFn(
    tensorflow::shape_inference::ScalarShape);
REGISTER_KERNEL_BUILDER(Name("ChorusSize").Device(tensorflow::DEVICE_CPU), IdentityKernel<false>);

}  // namespace chorus_tf
