// Runs graph nodes on tensors: each node calls its op front end, or for a backward kind the
// gradient kernel of ops/derivatives.cpp. Nothing records a tape: the graph holds the backward.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "codegen/lower.h"
#include "graph/ir.h"

namespace nexus::engine {

// A graph's CompiledPlan (forward and backward partitioned apart) indexed by node, as the executor
// runs it: a group runs as one generated kernel at its last member node (every input exists by then
// and no outside reader comes earlier: graph::partition closes a group at its first outside read).
// For a device, only the groups a device runs as one kernel are kept (codegen::runs_on_device: no
// reductions, a bounded number of operands); the others' nodes run one by one, and a refusal says so.
struct GraphKernels {
  codegen::CompiledPlan plan;
  std::vector<int> group_of;  // per node: its group, or -1

  GraphKernels(const graph::Graph& g, int forward_end, Device device = Device::cpu());
  // A graph without a backward (an nx.jit trace): one partition for the values `roots` need.
  GraphKernels(const graph::Graph& g, const std::vector<int>& roots, Device device = Device::cpu());

 private:
  // Drops one-op groups (and on a device the groups it cannot run); fills group_of (sized by the
  // constructor, all -1).
  void index(Device device = Device::cpu());
};

// One kind of pass over a graph (a training step, predict, an nx.jit call), worked out once by
// its owner and run by an Executor as often as it likes.
struct Schedule {
  std::vector<bool> run;    // per node: the node runs
  std::vector<bool> fused;  // per group: runs as its kernel (every member is in `run`; a subset
                            // pass such as predict may need part of a group: it runs node by node)
  std::vector<int> last;    // per value: the node after which it is freed (a fused group reads
                            // its inputs at its last member); INT_MAX: kept past the pass

  Schedule() = default;
  // keep: the pass's results.
  Schedule(const graph::Graph& g, const GraphKernels* fusion, std::vector<bool> run, const std::vector<int>& keep);
};

// The fused group node i runs in during the pass `s`, or -1 when it runs on its own.
int running_group(const GraphKernels* fusion, const Schedule& s, size_t i);

// The activation memory of the pass `s` at batch size `batch`, as the executor holds it: each
// value a node writes (a fused group writes only its outputs) lives until it is freed after its
// last reader (a kept value, or one nothing reads, until the pass ends). Backward nodes read the
// activations their rules need, so they count until then; kernels' scratch is not counted.
struct MemoryStats {
  int64_t batch = 0;
  int64_t peak_bytes = 0;   // the most activation bytes alive at once
  int64_t total_bytes = 0;  // every activation in its own buffer (nothing freed)
  int64_t grad_bytes = 0;   // parameter gradients (as large as the parameters; not activations)
};
MemoryStats memory_stats(const graph::Graph& g, const GraphKernels* fusion, const Schedule& s, int64_t batch);

// n's inputs with an undefined tensor where n's attrs mark an optional input absent.
std::vector<Tensor> with_absent(const graph::Node& n, std::vector<Tensor> present);
// Node n's inputs from `env`, with an undefined tensor where n's attrs mark an optional input absent.
std::vector<Tensor> node_inputs(const graph::Node& n, const std::vector<Tensor>& env);

// One forward node on concrete inputs (in the order of node.inputs; node_inputs fills absent ones).
Tensor run_forward_node(const graph::Node& node, const std::vector<Tensor>& inputs, bool training);

// The nodes whose result is described by their value (its dtype, and for sources its shape),
// not by their inputs: constants, conversions and generators (Const, Cast, Fill, Arange, Rand, Randn).
bool typed(graph::OpKind kind);
// Sources (Const, Fill, Arange, Rand, Randn) are made on `device` (random numbers are drawn on
// the host and copied, as nx.rand does); a scalar Const stays a host scalar, which goes with any
// device's tensors.
Tensor run_typed_node(const graph::Node& node, const std::vector<Tensor>& inputs, const graph::Value& value,
                      Device device = Device::cpu());

// Shape inference (engine/shape_infer.h) runs forward nodes through the two functions above.

// The state of one pass over a graph: values by id. Passes run under no-grad.
class Executor {
 public:
  // fusion: null runs every node on its own. device: where the pass's sources are made (its
  // inputs, parameters and buffers are set on it by the caller).
  explicit Executor(const graph::Graph& g, const GraphKernels* fusion = nullptr, Device device = Device::cpu());

  void set(int value, Tensor t) { env_[size_t(value)] = std::move(t); }
  const Tensor& get(int value) const { return env_[size_t(value)]; }
  // Drops every value, so the next pass starts from nothing (and holds no memory meanwhile).
  void clear() { std::fill(env_.begin(), env_.end(), Tensor()); }

  // Runs the nodes [begin, end) that `s` runs; frees each value after s.last[value].
  void run(size_t begin, size_t end, const Schedule& s, bool training);

  // Called with node i's index once node i (or the fused group it closes) has run.
  std::function<void(size_t)> after_node;

 private:
  void forward(size_t i, bool training);
  void conv2d_grad(size_t i);
  void run_group(int group);
  void release_after(size_t i, const graph::Node& n, const std::vector<int>& last);

  const graph::Graph& g_;
  const GraphKernels* fusion_;
  Device device_;
  std::vector<Tensor> env_;
};

}  // namespace nexus::engine
