// Runs graph nodes on tensors: each node calls its op front end, or for a backward kind the
// gradient kernel of ops/derivatives.cpp. Nothing records a tape: the graph holds the backward.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "codegen/lower.h"
#include "graph/ir.h"

namespace nexus::engine {

// The fusion groups of a graph (forward and backward partitioned apart), as the executor runs
// them: a group runs as one generated kernel at its last member node (every input exists by then
// and no outside reader comes earlier: graph::partition closes a group at its first outside read).
struct Fusion {
  codegen::FusedGraph fused;
  std::vector<int> group_of;  // per node: its group, or -1

  Fusion(const graph::Graph& g, int forward_end);
  // A graph without a backward (an nx.jit trace): one partition for the values `roots` need.
  Fusion(const graph::Graph& g, const std::vector<int>& roots);
  // The group runs fused only when every member is in `run` (a subset pass, such as predict,
  // may need only part of a group: its members then run one by one).
  bool usable(int group, const std::vector<bool>& run) const;

 private:
  void index();  // drops one-op groups; fills group_of (sized by the constructor, all -1)
};

// When each value of a pass over the nodes in `run` can be freed: after its last reader, a fused
// group counting as reading at its last member; the values in `keep` are never freed.
std::vector<int> last_uses(const graph::Graph& g, const Fusion* fusion, const std::vector<bool>& run,
                           const std::vector<int>& keep);

// n's inputs with an undefined tensor where n's attrs mark an optional input absent.
std::vector<Tensor> with_absent(const graph::Node& n, std::vector<Tensor> present);
// Node n's inputs from `env`, with an undefined tensor where n's attrs mark an optional input absent.
std::vector<Tensor> node_inputs(const graph::Node& n, const std::vector<Tensor>& env);

// One forward node on concrete inputs (in the order of node.inputs; node_inputs fills absent ones).
Tensor run_forward_node(const graph::Node& node, const std::vector<Tensor>& inputs, bool training);

// The nodes whose result is described by their value (its dtype, and for sources its shape),
// not by their inputs: constants, conversions and generators (Const, Cast, Fill, Arange, Rand, Randn).
bool typed(graph::OpKind kind);
Tensor run_typed_node(const graph::Node& node, const std::vector<Tensor>& inputs, const graph::Value& value);

// Shape inference (engine/shape_infer.h) runs forward nodes through the two functions above.

// The state of one pass over a graph: values by id. Passes run under no-grad.
class Executor {
 public:
  // fusion: null runs every node on its own.
  explicit Executor(const graph::Graph& g, const Fusion* fusion = nullptr);

  void set(int value, Tensor t) { env_[size_t(value)] = std::move(t); }
  const Tensor& get(int value) const { return env_[size_t(value)]; }

  // Runs nodes [begin, end) where run[i]; frees each value after last[value].
  void run(size_t begin, size_t end, const std::vector<bool>& run, const std::vector<int>& last, bool training);

  // Called with node i's index once node i (or the fused group it closes) has run.
  std::function<void(size_t)> after_node;

 private:
  void forward(size_t i, bool training);
  void conv2d_grad(size_t i);
  void run_group(int group);
  void release_after(size_t i, const graph::Node& n, const std::vector<int>& last);

  const graph::Graph& g_;
  const Fusion* fusion_;
  std::vector<Tensor> env_;
};

}  // namespace nexus::engine
