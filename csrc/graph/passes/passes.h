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

// Inference graphs: a Conv2d whose output only an Add and/or a ReLU read (conv -> relu,
// conv -> add -> relu, conv -> add) takes them as its epilogue: the Add's other operand becomes the
// conv's fourth input (the residual; it must be computed before the conv), ints[5] says which
// (kEpilogue* bits), and the folded nodes are removed. float32/float64 values only; nothing whose
// value is a root or read twice is folded. Returns how many nodes were removed. Not for a graph
// that autodiff will differentiate (the folded conv has no rule).
inline constexpr int64_t kEpilogueAdd = 1, kEpilogueRelu = 2;
int fold_conv_epilogues(Graph& g, const std::vector<int>& roots);

// Which nodes the values `roots` depend on (dead-code elimination as a mask over nodes).
std::vector<bool> live_nodes(const Graph& g, const std::vector<int>& roots, int end);

// The last node (index) that reads each value; -1 for values never read.
std::vector<int> last_uses(const Graph& g, const std::vector<bool>& run);

}  // namespace nexus::graph
