// Graph passes, one function per file. The compile driver in engine/compiled_model.cpp runs them
// as a list of named steps.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/ir.h"

namespace nexus::graph {

// Appends the backward pass for g.loss: OnesLike, then each node's rule as nodes, in reverse
// order of the forward nodes that lead from a param to the loss. Fills g.param_grads. Forward is [0, forward_end).
// constant_seed (a loss of fixed shape): the seed is a Const 1, so that the backward does not
// read the loss's value and can run in the loss's kernel (nx.jit).
void autodiff(Graph& g, bool constant_seed = false);

// Which nodes the values `roots` depend on (dead-code elimination as a mask over nodes).
std::vector<bool> live_nodes(const Graph& g, const std::vector<int>& roots, int end);

// The last node (index) that reads each value; -1 for values never read.
std::vector<int> last_uses(const Graph& g, const std::vector<bool>& run);

}  // namespace nexus::graph
