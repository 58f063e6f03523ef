// Lowering: a FusionGroup of a Graph -> the FusedKernel that computes it, with the values of
// its constant slots. Casts are inserted exactly where the eager ops convert (promotion, compute
// dtypes, rounding halves after each op), so fused and eager results agree.
#pragma once

#include <vector>

#include "codegen/fused_kernel.h"
#include "codegen/program.h"
#include "graph/ir.h"
#include "graph/passes/fuse.h"

namespace nexus::codegen {

struct Lowered {
  FusedKernel kernel;
  std::vector<double> consts;  // per constant slot: the launch's values
};

Lowered lower(const graph::Graph& g, const graph::FusionGroup& group);

// The entry point for executors (nx.jit today, the engine next): partition the nodes
// [begin, end) of g (graph::partition) and make each group runnable. At run time, for each group
// in order: outputs = program->run(tensors of group.inputs, consts),
// which yields the values group.outputs; the nodes of group.nodes are not run one by one.
struct FusedGroup {
  graph::FusionGroup group;
  std::shared_ptr<Program> program;  // shared by identical groups of every graph in the process
  std::vector<double> consts;
};
struct FusedGraph {
  std::vector<FusedGroup> groups;
  std::vector<std::string> refusals;
};
FusedGraph fuse_graph(const graph::Graph& g, const std::vector<int>& roots, int begin = 0, int end = -1);

}  // namespace nexus::codegen
