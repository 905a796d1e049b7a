// A torch.distributed process group over a Chorus communicator, registered as backend "chorus"
// (chorus_torch/__init__.py). Built against the installed libchorus (its C++ API is header-only
// over the C API) and the installed torch; see build.sh and docs/integrations.md.
//
// Every operation starts a Chorus asynchronous operation at once and returns a Work whose wait()
// and future complete when the data is in place. CPU tensors only, contiguous, one tensor per
// argument list entry (as c10d's CPU backends take them).
#ifndef CHORUS_INTEGRATIONS_TORCH_PROCESS_GROUP_CHORUS_H_
#define CHORUS_INTEGRATIONS_TORCH_PROCESS_GROUP_CHORUS_H_

#include <chorus/chorus.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace chorus_torch {

class ProcessGroupChorus;

// One started operation: the Chorus Work, the tensors it uses (kept alive until it is done),
// what to do once it is done (copy results out), and torch's view of it (wait(), future).
class ChorusWork : public c10d::Work {
 public:
  ChorusWork(int rank, c10d::OpType type, chorus::Work work, std::vector<at::Tensor> keep_alive,
             std::vector<at::Tensor> results, std::function<void()> on_success);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::vector<at::Tensor> result() override { return results_; }
  int sourceRank() const override { return work_.peer(); }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Completes this work if its Chorus operation has finished (waiting up to `timeout_seconds`
  // for it); true once completed. Called by the group's completion thread only.
  bool Poll(double timeout_seconds);

 private:
  chorus::Work work_;
  std::vector<at::Tensor> keep_alive_;
  std::vector<at::Tensor> results_;
  std::function<void()> on_success_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupChorus : public c10d::ProcessGroup {
 public:
  // Joins the group through the Chorus store the environment names (CHORUS_STORE, else
  // MASTER_ADDR / MASTER_PORT + 1) on the device it names (CHORUS_TRANSPORT).
  ProcessGroupChorus(int rank, int size, std::chrono::milliseconds timeout);
  ~ProcessGroupChorus() override;

  const std::string getBackendName() const override { return "chorus"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;

 private:
  // Hands `work` to the completion thread and returns it.
  c10::intrusive_ptr<c10d::Work> Track(c10::intrusive_ptr<ChorusWork> work);
  void CompleteLoop();

  chorus::Store store_;
  chorus::Device device_;
  chorus::Communicator comm_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<c10::intrusive_ptr<ChorusWork>> pending_;  // guarded by mu_
  bool stopping_ = false;                                // guarded by mu_
  std::thread completer_;
};

}  // namespace chorus_torch

#endif  // CHORUS_INTEGRATIONS_TORCH_PROCESS_GROUP_CHORUS_H_
