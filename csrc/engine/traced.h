// A traced function (nx.jit): the graph a trace recorded, run by the Executor like a compiled
// model's forward pass: fused groups as generated kernels, other nodes as ops, values freed
// after their last use, one native call per function call.
#pragma once

#include <vector>

#include "engine/executor.h"
#include "graph/ir.h"

namespace nexus::engine {

class TracedProgram {
 public:
  // roots: the values the function returns. fuse=false runs every node as its op.
  TracedProgram(graph::Graph g, std::vector<int> roots, bool fuse = true);

  // inputs: one tensor per Input node, in the order of g.inputs; returns the roots' tensors.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;

  const graph::Graph& graph() const { return g_; }
  const Fusion* fusion() const { return fusion_.get(); }
  const std::vector<bool>& live() const { return run_; }

 private:
  graph::Graph g_;
  std::vector<int> roots_;
  std::unique_ptr<Fusion> fusion_;
  std::vector<bool> run_;       // the nodes the roots depend on
  std::vector<int> last_;       // per value: the node after which it is freed
};

}  // namespace nexus::engine
