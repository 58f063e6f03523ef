// Reverse-mode autodiff as a graph transformation: for each forward node on a path from a param
// to the loss, in reverse order, one Grad node that maps the node's output gradient to its input
// gradients (the rules are the eager table in ops/derivatives.cpp, applied by the executor), and a
// GradSum wherever a value feeds several nodes.
#include <map>

#include "graph/passes/passes.h"
#include "ops/derivatives.h"

namespace nexus::graph {

static bool differentiable(OpKind k) {
  return k != OpKind::Input && k != OpKind::Buffer && k != OpKind::Param;
}

// Which of a forward node's inputs (and, last, its output) its backward rule reads. The Grad node
// lists exactly these as inputs, so liveness keeps them until it runs and frees the rest early.
static std::vector<int64_t> grad_reads(const Node& n) {
  size_t k = n.inputs.size();
  std::vector<int64_t> r(k + 1, 1);
  auto set = [&](ops::grad::Saves s) {
    r[0] = s.a;
    if (k > 1) r[1] = s.b;
    r[k] = s.out;
  };
  switch (n.kind) {
    case OpKind::Unary: set(ops::grad::saves(n.attrs.unary)); break;
    case OpKind::Binary: set(ops::grad::saves(n.attrs.binary)); break;
    case OpKind::MatMul: case OpKind::CrossEntropy: r[k] = 0; break;
    case OpKind::Conv2d: std::fill(r.begin() + 2, r.end(), 0); break;  // reads x and w
    case OpKind::Reshape: case OpKind::MaxPool2d: case OpKind::AvgPool2d:
      std::fill(r.begin(), r.end(), 0);
      break;
    default: break;  // composites: their primitives' rules may read any input
  }
  return r;
}

void autodiff(Graph& g) {
  NX_ASSERT(g.loss >= 0, "autodiff needs a loss value");
  const int n_forward = int(g.nodes().size());
  g.forward_end = n_forward;
  // Values that depend on a param (their gradient is worth computing).
  std::vector<bool> needs(g.values().size(), false);
  for (int p : g.params) needs[size_t(p)] = true;
  for (int i = 0; i < n_forward; ++i) {
    const Node& n = g.nodes()[size_t(i)];
    if (!differentiable(n.kind)) continue;
    bool any = false;
    for (int v : n.inputs) any = any || needs[size_t(v)];
    for (int v : n.outputs) needs[size_t(v)] = any;
  }
  std::map<int, std::vector<int>> contrib;  // value -> gradient values flowing into it
  auto gradient_of = [&](int v, const std::string& name) -> int {
    auto it = contrib.find(v);
    if (it == contrib.end()) return -1;
    if (it->second.size() == 1) return it->second[0];
    const Value& val = g.value(v);
    int sum = g.add_node(OpKind::GradSum, it->second, {}, name, val.shape, val.dtype);
    it->second = {sum};
    return sum;
  };
  const Value& loss = g.value(g.loss);
  contrib[g.loss] = {g.add_node(OpKind::OnesLike, {g.loss}, {}, "loss", loss.shape, loss.dtype)};
  for (int i = n_forward - 1; i >= 0; --i) {
    Node fwd = g.nodes()[size_t(i)];  // copy: add_node may reallocate
    if (!differentiable(fwd.kind) || !needs[size_t(fwd.outputs[0])]) continue;
    int gout = gradient_of(fwd.outputs[0], fwd.name);
    if (gout < 0) continue;  // does not reach the loss
    std::vector<int64_t> reads = grad_reads(fwd);
    std::vector<int> inputs{gout};  // then the saved activations, live until this node runs
    for (size_t k = 0; k < fwd.inputs.size(); ++k)
      if (reads[k]) inputs.push_back(fwd.inputs[k]);
    if (reads.back()) inputs.push_back(fwd.outputs[0]);
    graph::Attrs attrs;
    attrs.ints = reads;
    Node grad{OpKind::Grad, inputs, {}, attrs, fwd.name, i};
    int node_index = int(g.nodes().size());
    for (int v : fwd.inputs) {
      if (!needs[size_t(v)]) {
        grad.outputs.push_back(-1);
        continue;
      }
      const Value& in = g.value(v);
      int gv = g.add_value(in.shape, in.dtype, "d" + in.name);
      g.values()[size_t(gv)].producer = node_index;
      grad.outputs.push_back(gv);
      contrib[v].push_back(gv);
    }
    g.nodes().push_back(std::move(grad));
  }
  g.param_grads.clear();
  for (int p : g.params) g.param_grads.push_back(gradient_of(p, g.value(p).name));
  g.verify();
}

std::vector<bool> live_nodes(const Graph& g, const std::vector<int>& roots, int end) {
  std::vector<bool> need_value(g.values().size(), false), run(g.nodes().size(), false);
  for (int r : roots) if (r >= 0) need_value[size_t(r)] = true;
  for (int i = end - 1; i >= 0; --i) {
    const Node& n = g.nodes()[size_t(i)];
    bool live = false;
    for (int v : n.outputs) live = live || (v >= 0 && need_value[size_t(v)]);
    if (!live) continue;
    run[size_t(i)] = true;
    for (int v : n.inputs) need_value[size_t(v)] = true;
  }
  return run;
}

std::vector<int> last_uses(const Graph& g, const std::vector<bool>& run) {
  std::vector<int> last(g.values().size(), -1);
  for (size_t i = 0; i < g.nodes().size(); ++i)
    if (run[i])
      for (int v : g.nodes()[i].inputs) last[size_t(v)] = int(i);
  return last;
}

}  // namespace nexus::graph
