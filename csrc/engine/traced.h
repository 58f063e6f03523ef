// A traced function (nx.jit): the graph a trace recorded, run by the Executor like a compiled
// model's forward pass: fused groups as generated kernels, other nodes as ops, values freed
// after their last use, one native call per function call.
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

  // inputs: one tensor per Input node, in the order of g.inputs; returns the roots' tensors.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;
  // One run, timed: seconds per node, each op or fused kernel's time at its last node (0 elsewhere).
  std::vector<double> profile(const std::vector<Tensor>& inputs) const;

  const graph::Graph& graph() const { return g_; }
  const GraphKernels* fusion() const { return fusion_.get(); }
  const std::vector<bool>& live() const { return schedule_.run; }

 private:
  graph::Graph g_;
  std::vector<int> roots_;
  std::unique_ptr<GraphKernels> fusion_;
  Schedule schedule_;  // the nodes the roots depend on
  // One executor reused by every call (its tables are sized once); a call that finds it taken by
  // another thread's call runs on an executor of its own.
  mutable std::mutex mu_;
  mutable std::unique_ptr<Executor> executor_;

  std::vector<Tensor> run_on(Executor& ex, const std::vector<Tensor>& inputs) const;
};

}  // namespace nexus::engine
