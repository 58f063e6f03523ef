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

// Inference graphs: a Conv2d or MatMul whose output only an Add and/or a ReLU read (x -> relu,
// x -> add -> relu, x -> add) takes them as its epilogue and runs where the last of them ran. The
// Add's other operand must be, for a Conv2d, of the output's shape (the residual: its fourth
// input, ints[5] the kEpilogue* bits) or, for a MatMul (..., k) @ (k, n), n values (the bias: its
// third input, ints[0] the bits). float32/float64 only;
// nothing whose value is a root or read twice is folded. Returns how many nodes were removed. Not
// for a graph that autodiff will differentiate (the folded nodes have no rule).
inline constexpr int64_t kEpilogueAdd = 1, kEpilogueRelu = 2;
int fold_epilogues(Graph& g, const std::vector<int>& roots);
// A node's folded epilogue bits (0: none).
int64_t epilogue_of(const Node& n);

// Which nodes the values `roots` depend on (dead-code elimination as a mask over nodes).
std::vector<bool> live_nodes(const Graph& g, const std::vector<int>& roots, int end);

// The last node (index) that reads each value; -1 for values never read.
std::vector<int> last_uses(const Graph& g, const std::vector<bool>& run);

}  // namespace nexus::graph
