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

// The entry point for the engine: partition the nodes [begin, end) of g (graph::partition) and
// compile each group (the glossary: graph/passes/fuse.h). At run time, for each group
// in order: outputs = program->run(tensors of group.inputs, consts),
// which yields the values group.outputs; the nodes of group.nodes are not run one by one.
struct CompiledGroup {
  graph::FusionGroup group;
  std::shared_ptr<Program> program;  // shared by identical groups of every graph in the process
  std::vector<double> consts;
};
struct CompiledPlan {
  std::vector<CompiledGroup> groups;
  std::vector<std::string> refusals;
};
CompiledPlan compile_plan(const graph::Graph& g, const std::vector<int>& roots, int begin = 0, int end = -1,
                          bool whole_graph = false);

}  // namespace nexus::codegen
