// Reverse-mode autodiff as a graph transformation: for each forward node on a path from a param
// to the loss, in reverse order, the nodes that map its output gradient to its input gradients.
// Elementwise ops get their rule as elementwise IR (ops/derivative_rules.h, the eager tape's own
// expressions; broadcast inputs get a Reduce), so the fusion pass groups the backward too; other
// ops get one Grad node whose rule the executor replays from the eager table. Gradients of a
// value that feeds several nodes are added up.
#include <algorithm>
#include <map>

#include "graph/passes/passes.h"
#include "ops/derivative_rules.h"
#include "ops/ops.h"

namespace nexus::graph {
namespace {

bool source(OpKind k) { return k == OpKind::Input || k == OpKind::Buffer || k == OpKind::Param; }

// Does a gradient flow through node n (comparisons and sources stop it)?
bool differentiable(const Node& n) {
  return !source(n.kind) && !(n.kind == OpKind::Binary && ops::is_comparison(n.attrs.binary));
}

bool elementwise(const Node& n) { return n.kind == OpKind::Unary || n.kind == OpKind::Binary; }

// Which of a forward node's inputs (and, last, its output) its backward rule reads. The Grad node
// lists exactly these as inputs, so liveness keeps them until it runs and frees the rest early.
std::vector<int64_t> grad_reads(const Node& n) {
  size_t k = n.inputs.size();
  std::vector<int64_t> r(k + 1, 1);
  switch (n.kind) {
    case OpKind::MatMul: case OpKind::CrossEntropy: r[k] = 0; break;
    case OpKind::Conv2d: std::fill(r.begin() + 2, r.end(), 0); break;  // reads x and w
    case OpKind::Reshape: case OpKind::MaxPool2d: case OpKind::AvgPool2d:
      std::fill(r.begin(), r.end(), 0);
      break;
    default: break;  // composites: their primitives' rules may read any input
  }
  return r;
}

// The rules of derivative_rules.h on graph values: each call appends a node named after the
// forward layer, with the dtype the eager op would give.
class GraphAlgebra {
 public:
  GraphAlgebra(Graph& g, std::string name) : g_(g), name_(std::move(name)) {}

  int unary(ops::UnaryOp op, int x) {
    Attrs a;
    a.unary = op;
    return g_.add_node(OpKind::Unary, {x}, a, name_, shape(x), ops::unary_result_dtype(op, dtype(x)));
  }
  int binary(ops::BinaryOp op, int x, int y) {
    Attrs a;
    a.binary = op;
    // kBatch broadcasts like any size: it equals itself and wins over 1
    return g_.add_node(OpKind::Binary, {x, y}, a, name_, broadcast_shapes(shape(x), shape(y), "backward"),
                       ops::binary_result_dtype(op, dtype(x), dtype(y)));
  }
  int scalar(double v, int like) {
    Attrs a;
    a.floats = {v};
    return g_.add_node(OpKind::Const, {}, a, name_, {}, dtype(like));
  }
  int cast_like(int x, int like) {
    return dtype(x) == dtype(like) ? x : g_.add_node(OpKind::Cast, {x}, {}, name_, shape(x), dtype(like));
  }
  // A gradient at the broadcast shape summed back to like's shape (ops::sum_to), in like's dtype.
  int reduce_to(int grad, int like) {
    const Shape from = shape(grad), to = shape(like);
    const size_t lead = from.size() - to.size();
    Attrs a;  // a sum over the broadcast axes
    a.reduce = ReduceOp::Sum;
    bool inner = false;
    for (size_t i = 0; i < from.size(); ++i) {
      bool lead_axis = i < lead, widened = !lead_axis && to[i - lead] == 1 && from[i] != 1;
      if (lead_axis || widened) a.ints.push_back(int64_t(i));
      inner = inner || widened;
    }
    int r = grad;
    if (!a.ints.empty()) {
      a.keepdims = lead == 0;
      Shape kept;
      for (size_t i = 0; i < from.size(); ++i)
        if (!std::count(a.ints.begin(), a.ints.end(), int64_t(i))) kept.push_back(from[i]);
        else if (a.keepdims) kept.push_back(1);
      r = g_.add_node(OpKind::Reduce, {grad}, a, name_, kept, dtype(grad));
      if (lead && inner) {
        Attrs reshape;
        reshape.ints = to;
        r = g_.add_node(OpKind::Reshape, {r}, reshape, name_, to, dtype(grad));
      }
    }
    return cast_like(r, like);
  }

 private:
  Shape shape(int v) const { return g_.value(v).shape; }  // copies: add_node may reallocate
  DType dtype(int v) const { return g_.value(v).dtype; }
  Graph& g_;
  std::string name_;
};

}  // namespace

void autodiff(Graph& g) {
  NX_ASSERT(g.loss >= 0, "autodiff needs a loss value");
  const int n_forward = int(g.nodes().size());
  g.forward_end = n_forward;
  // Values that depend on a param (their gradient is worth computing).
  std::vector<bool> needs(g.values().size(), false);
  for (int p : g.params) needs[size_t(p)] = true;
  for (int i = 0; i < n_forward; ++i) {
    const Node& n = g.nodes()[size_t(i)];
    if (!differentiable(n)) continue;
    bool any = false;
    for (int v : n.inputs) any = any || needs[size_t(v)];
    for (int v : n.outputs) needs[size_t(v)] = any;
  }
  std::map<int, std::vector<int>> contrib;  // value -> gradient values flowing into it
  auto gradient_of = [&](int v, const std::string& name) -> int {
    auto it = contrib.find(v);
    if (it == contrib.end()) return -1;
    GraphAlgebra k(g, name);
    int sum = it->second[0];
    for (size_t i = 1; i < it->second.size(); ++i) sum = k.binary(ops::BinaryOp::Add, sum, it->second[i]);
    it->second = {sum};
    return sum;
  };
  const Value& loss = g.value(g.loss);
  contrib[g.loss] = {g.add_node(OpKind::OnesLike, {g.loss}, {}, "loss", loss.shape, loss.dtype)};
  for (int i = n_forward - 1; i >= 0; --i) {
    Node fwd = g.nodes()[size_t(i)];  // copy: add_node may reallocate
    if (!differentiable(fwd) || !needs[size_t(fwd.outputs[0])]) continue;
    int gout = gradient_of(fwd.outputs[0], fwd.name);
    if (gout < 0) continue;  // does not reach the loss
    if (elementwise(fwd)) {
      GraphAlgebra k(g, fwd.name);
      const int out = fwd.outputs[0];
      if (fwd.kind == OpKind::Unary) {
        const int x = fwd.inputs[0];
        contrib[x].push_back(k.reduce_to(ops::grad::unary_rule(k, fwd.attrs.unary, x, out, gout), x));
        continue;
      }
      const int a = fwd.inputs[0], b = fwd.inputs[1];
      const bool need_a = needs[size_t(a)], need_b = needs[size_t(b)];
      auto [ga, gb] = ops::grad::binary_rule(k, fwd.attrs.binary, a, b, out, gout, {need_a, need_b});
      if (need_a) contrib[a].push_back(k.reduce_to(ga, a));
      if (need_b) contrib[b].push_back(k.reduce_to(gb, b));
      continue;
    }
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
