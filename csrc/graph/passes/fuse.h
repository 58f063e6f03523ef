// Fusion partitioning (passes/fuse.cpp): which nodes of a graph become one fused kernel.
//
// The fusion glossary, one name per stage:
//   graph::FusionGroup     the nodes that become one kernel (this file)
//   graph::FusionPlan      a graph's FusionGroups and the refusals (graph::partition)
//   codegen::CompiledGroup a FusionGroup with its compiled Program and constants (codegen/lower.h)
//   codegen::CompiledPlan  a FusionPlan whose groups are compiled (codegen::compile_plan)
//   engine::GraphKernels   a graph's CompiledPlan indexed by node, as the executor runs it
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace nexus::graph {

struct FusionGroup {
  std::vector<int> nodes;       // node indices, in graph order (elementwise ops, then maybe one Reduce)
  std::vector<int> recomputed;  // nodes of another group (ending in a reduction) whose values this
                                // one computes again from their inputs rather than reading them
                                // (partition's `whole_graph`); in graph order
  std::vector<int> inputs;      // values read from outside the group (Const values excluded)
  std::vector<int> consts;      // values of Const nodes the group reads (inlined as constants)
  std::vector<int> outputs;     // values used after the group (or roots); a reduction group: its result
  int anchor = -1;              // a MatMul/Conv2d node whose output the group's first op reads: a
                                // bias + activation epilogue the engine can run on the GEMM's tiles
  int64_t bytes_unfused = 0;    // bytes the member ops read and write one by one (per batch row
  int64_t bytes_fused = 0;      // when the shape has kBatch), and the group reads and writes fused
};

struct FusionPlan {
  std::vector<FusionGroup> groups;
  std::vector<std::string> refusals;  // "cannot fuse X with Y: reason", for explain()
};

bool is_fusable_elementwise(OpKind k);

// At batch size `batch`: the bytes a group's kernel reads and writes (its inputs and outputs),
// and the bytes its member ops read and write one by one.
int64_t fused_bytes(const Graph& g, const FusionGroup& group, int64_t batch);
int64_t unfused_bytes(const Graph& g, const FusionGroup& group, int64_t batch);

// Does a reduction over `axes` (empty: all) reduce every axis of a rank-`ndim` shape?
inline bool reduces_every_axis(const std::vector<int64_t>& axes, int64_t ndim) {
  return axes.empty() || int64_t(axes.size()) == ndim;
}

// Can a reduction `reduce` of a `dtype` value over `axes` of a rank-`ndim` shape also store its
// group's elementwise values: a floating sum or mean over leading axes that keeps at least one
// dim (a bias gradient; its kernel then runs row by row), or over axes that include the last one
// (a loss over every axis, a batch norm's per-channel sum over (N, H, W); chunk by chunk along
// the last axis, storing as it reads).
bool reduction_with_side_outputs(ReduceOp reduce, DType dtype, const std::vector<int64_t>& axes, int64_t ndim);

// Groups the nodes [begin, end) of g: maximal chains of elementwise/broadcast ops of one
// iteration shape, each optionally closed by a reduction epilogue. `roots` are values needed
// after the graph (outputs); g.output and g.loss count too. A pure function of the graph.
// whole_graph (one plan for a whole traced program, nx.jit): a group whose epilogue is a floating
// sum or mean over every axis (a loss) also takes the later elementwise nodes of its shape that
// do not depend on that reduction (its backward), which its kernel stores as it reads; and an
// elementwise node that still reads a value of a group ending in a reduction computes that value
// again in its own kernel from the chain's inputs (graph inputs, parameters, constants; at most
// kMaxRecomputed nodes), so the reduction's kernel stores nothing else. The same instructions
// run either way, so the bits are the same.
inline constexpr size_t kMaxRecomputed = 8;
FusionPlan partition(const Graph& g, const std::vector<int>& roots, int begin = 0, int end = -1,
                     bool whole_graph = false);

}  // namespace nexus::graph
