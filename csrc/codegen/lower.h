// Lowering: a FusionGroup of a Graph -> the FusedKernel that computes it, with the values of
// its constant slots. Casts are inserted exactly where the eager ops convert (promotion, compute
// dtypes, rounding halves after each op), so fused and eager results agree.
#pragma once

#include <vector>

#include "codegen/fused_kernel.h"
#include "graph/ir.h"
#include "graph/passes/fuse.h"

namespace nexus::codegen {

struct Lowered {
  FusedKernel kernel;
  std::vector<double> consts;  // per constant slot: the launch's values
};

Lowered lower(const graph::Graph& g, const graph::FusionGroup& group);

}  // namespace nexus::codegen
