// A model compiled for training: the forward graph plus its generated backward, planned once,
// run as one native call per step (forward, backward and the optimizer update).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "graph/ir.h"
#include "engine/executor.h"
#include "engine/grad_reducer.h"
#include "ops/optim.h"

namespace nexus::engine {

class CompiledModel {
 public:
  // g: a forward graph with inputs [features, labels], g.output (predictions) and g.loss set.
  // fuse: run the elementwise chains of the forward and of the generated backward as generated
  // kernels (codegen/); false runs every node on its own (the reference fusion is tested against).
  CompiledModel(graph::Graph g, std::vector<Tensor> params, std::vector<Tensor> buffers, bool fuse = true);

  // Moves the parameters and buffers to `device`; every later pass runs there, its inputs moved
  // to it first. On a device the elementwise fused groups run as generated kernels (their CUDA
  // dialect) and every other node on its own; the fusion plan is made again for the new device.
  void to(Device device);
  Device device() const { return device_; }

  // Called during backward with a parameter's index and its gradient as soon as that gradient
  // is final (nothing later in the pass writes it), so a caller can start reducing it while
  // backward goes on (data-parallel overlap). Runs on the thread running the pass.
  using GradReady = std::function<void(size_t param, const Tensor& grad)>;

  // Forward and backward on one batch; returns the loss and leaves the gradients in grads().
  // after_node: called with each node's index once it (or the fused group it closes) has run.
  double forward_backward(const Tensor& x, const Tensor& y, const GradReady& ready = {},
                          const std::function<void(size_t)>& after_node = {});
  // forward_backward, timed: the seconds each node took (a fused group's at its last member; 0
  // for nodes that did not run or ran inside a group). The gradients are left as forward_backward
  // leaves them.
  std::vector<double> profile(const Tensor& x, const Tensor& y);
  // One training step: forward_backward, then the fused optimizer update of every parameter.
  // The optimizer's state (step count, moments) belongs to the optimizer object that owns it.
  // With a reducer (data parallel), the gradients go through it between backward and the update
  // (see GradReducer) and the step returns the loss it reports; x with no rows runs no forward
  // or backward and contributes zero gradients.
  double train_step(const Tensor& x, const Tensor& y, const ops::optim::Config& opt, double lr,
                    ops::optim::State& state, GradReducer* reducer = nullptr);
  Tensor predict(const Tensor& x);                         // inference mode (no dropout, running stats)
  double evaluate_loss(const Tensor& x, const Tensor& y);  // inference mode

  std::vector<Tensor>& params() { return params_; }
  std::vector<Tensor>& buffers() { return buffers_; }
  const std::vector<Tensor>& grads() const { return grads_; }
  const graph::Graph& graph() const { return g_; }
  const GraphKernels* fusion() const { return fusion_.get(); }
  MemoryStats memory_stats(int64_t batch) const { return engine::memory_stats(g_, fusion_.get(), train_, batch); }

  // The memory traffic of one training step at `batch`: the bytes every op reads and writes
  // when each runs on its own, and when fused groups read their inputs and write their outputs
  // once (the optimizer update is not counted: fusion leaves it alone).
  struct Traffic {
    int64_t unfused = 0, fused = 0;
  };
  Traffic step_traffic(int64_t batch) const;

 private:
  void plan();  // fusion (where it runs) and the passes' schedules
  Tensor on_device(const Tensor& t) const;
  void bind_state(Executor& ex) const;
  double reduced_forward_backward(const Tensor& x, const Tensor& y, GradReducer& reducer);
  Schedule schedule(const std::vector<int>& roots, int end) const;

  graph::Graph g_;
  std::unique_ptr<GraphKernels> fusion_;
  std::vector<Tensor> params_, buffers_, grads_;
  Schedule train_, predict_, loss_;
  std::vector<std::vector<size_t>> grads_final_at_;  // per node: params whose gradient it ends
  bool fuse_ = true;
  Device device_;
};

}  // namespace nexus::engine
