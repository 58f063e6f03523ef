// A traced function (nx.jit): the graph a trace recorded, run by the Executor like a compiled
// model's forward pass: fused groups as generated kernels, other nodes as ops, values freed
// after their last use, one native call per function call. It runs on the device of its inputs:
// the host's plan is made with the program, a device's at the first call there (a device keeps
// only the groups it runs as one kernel; see GraphKernels).
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "engine/executor.h"
#include "graph/ir.h"

namespace nexus::engine {

class TracedProgram {
 public:
  // roots: the values the function returns. fuse=false runs every node as its op. epilogues:
  // fold convolutions' and products' Add and ReLU into them (graph::fold_epilogues; inference).
  TracedProgram(graph::Graph g, std::vector<int> roots, bool fuse = true, bool epilogues = false);

  // inputs: one tensor per Input node, in the order of g.inputs (on one device; host 0-d scalars
  // may join a device's tensors); returns the roots' tensors, on that device.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;
  // One run, timed: seconds per node, each op or fused kernel's time at its last node (0 elsewhere).
  std::vector<double> profile(const std::vector<Tensor>& inputs) const;

  const graph::Graph& graph() const { return g_; }
  const GraphKernels* fusion() const { return host_->fusion.get(); }  // the host's
  const std::vector<bool>& live() const { return host_->schedule.run; }

 private:
  struct DevicePlan {
    Device device;
    std::unique_ptr<GraphKernels> fusion;
    Schedule schedule;  // the nodes the roots depend on
    // One executor reused by every call (its tables are sized once); a call that finds it taken
    // by another thread's call runs on an executor of its own.
    std::mutex mu;
    std::unique_ptr<Executor> executor;
  };
  graph::Graph g_;
  std::vector<int> roots_;
  bool fuse_;
  std::unique_ptr<DevicePlan> host_;
  mutable std::mutex devices_mu_;
  mutable std::vector<std::unique_ptr<DevicePlan>> devices_;

  std::unique_ptr<DevicePlan> make_plan(Device device) const;
  DevicePlan& plan_for(const std::vector<Tensor>& inputs) const;
  std::vector<Tensor> run_on(Executor& ex, const Schedule& s, const std::vector<Tensor>& inputs) const;
};

}  // namespace nexus::engine
