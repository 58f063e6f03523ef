// Graph passes, one function per file. The compile driver in engine/compiled_model.cpp runs them
// as a list of named steps.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/ir.h"

namespace nexus::graph {

// Appends the backward pass for g.loss: OnesLike, then each node's rule as nodes, in reverse
// order of the forward nodes that lead from a param to the loss. Fills g.param_grads. Forward is [0, forward_end).
void autodiff(Graph& g);

// Which nodes the values `roots` depend on (dead-code elimination as a mask over nodes).
std::vector<bool> live_nodes(const Graph& g, const std::vector<int>& roots, int end);

// The last node (index) that reads each value; -1 for values never read.
std::vector<int> last_uses(const Graph& g, const std::vector<bool>& run);

struct MemoryPlan {
  int64_t batch = 0;
  int64_t peak_bytes = 0;   // the arena size: liveness-based reuse of activation buffers
  int64_t total_bytes = 0;  // every activation in its own buffer (no reuse)
  int64_t grad_bytes = 0;   // parameter gradients (as large as the parameters; not activations)
  std::vector<int64_t> offsets;  // per value; -1 for values not planned (params, buffers, inputs)
};

// Plans activation buffers of the nodes in `run` at the given batch size: each value gets an
// offset in one arena, live from its producing node to its last use (first-fit).
MemoryPlan plan_memory(const Graph& g, const std::vector<bool>& run, int64_t batch);

}  // namespace nexus::graph
