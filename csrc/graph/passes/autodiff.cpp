// Reverse-mode autodiff as a graph transformation: for each forward node on a path from a param
// to the loss, in reverse order, the nodes that map its output gradient to its input gradients.
// Each op's rule comes from ops/derivative_rules.h (the eager tape's own expressions) as graph
// nodes: elementwise IR, reductions, views, matmuls, and the backward kinds that call a gradient
// kernel, so fusion and the executor see the whole backward. Gradients of a value that feeds
// several nodes are added up.
#include <algorithm>
#include <bit>
#include <climits>
#include <map>

#include "graph/passes/passes.h"
#include "ops/derivative_rules.h"
#include "ops/internal.h"
#include "ops/ops.h"

namespace nexus::graph {
namespace {

bool source(OpKind k) { return k == OpKind::Input || k == OpKind::Buffer || k == OpKind::Param; }

// Does a gradient flow through node n (comparisons, detach, argmax and sources stop it)?
bool differentiable(const Node& n) {
  return !source(n.kind) && n.kind != OpKind::Detach && n.kind != OpKind::Argmax &&
         !(n.kind == OpKind::Binary && ops::is_comparison(n.attrs.binary));
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
  Shape shape(int v) const { return g_.value(v).shape; }  // copies: add_node may reallocate
  DType dtype(int v) const { return g_.value(v).dtype; }

  int matmul(int a, int b) {
    const Shape sa = shape(a), sb = shape(b);
    Shape out = broadcast_shapes(Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2), "backward");
    out.insert(out.end(), {sa[sa.size() - 2], sb.back()});
    return g_.add_node(OpKind::MatMul, {a, b}, {}, name_, out, promote_types(dtype(a), dtype(b)));
  }
  int permute(int x, const std::vector<int64_t>& dims) {
    const Shape in = shape(x);
    Shape out;
    for (int64_t d : dims) out.push_back(in[size_t(d)]);
    return g_.add_node(OpKind::Permute, {x}, ints(dims), name_, out, dtype(x));
  }
  // A batch dimension in `to` (dim 0) takes x's dim 0 at run time.
  int reshape(int x, const Shape& to) {
    return shape(x) == to ? x : g_.add_node(OpKind::Reshape, {x}, ints(to), name_, to, dtype(x));
  }
  // The target shape is like's: read at run time when it has a batch dimension (no size
  // before), else fixed in the node, so that the backward need not keep `like` alive.
  int expand_like(int x, int like) {
    const Shape& to = shape(like);
    if (shape(x) == to) return x;
    if (std::find(to.begin(), to.end(), kBatch) != to.end())
      return g_.add_node(OpKind::Expand, {x, like}, {}, name_, to, dtype(x));
    return g_.add_node(OpKind::Expand, {x}, ints(to), name_, to, dtype(x));
  }
  int sum(int x, const std::vector<int64_t>& axes, bool keepdims) { return reduce(ReduceOp::Sum, x, axes, keepdims); }
  int mean(int x, const std::vector<int64_t>& axes, bool keepdims) { return reduce(ReduceOp::Mean, x, axes, keepdims); }
  int where(int c, int a, int b) {
    Shape out = broadcast_shapes(broadcast_shapes(shape(c), shape(a), "backward"), shape(b), "backward");
    return g_.add_node(OpKind::Where, {c, a, b}, {}, name_, out, promote_types(dtype(a), dtype(b)));
  }
  // start and stop in range (the rules pass sizes they know)
  int slice(int x, int64_t axis, int64_t start, int64_t stop, int64_t step) {
    Shape out = shape(x);
    out[size_t(axis)] = (stop - start + step - 1) / step;
    return g_.add_node(OpKind::Slice, {x}, ints({axis, start, stop, step}), name_, out, dtype(x));
  }
  int select(int x, int64_t axis, int64_t index) {
    Shape out = shape(x);
    out.erase(out.begin() + axis);
    return g_.add_node(OpKind::Select, {x}, ints({axis, index}), name_, out, dtype(x));
  }
  int slice_grad(int g, int like, int64_t axis, int64_t start, int64_t stop, int64_t step) {
    return g_.add_node(OpKind::SliceGrad, {g, like}, ints({axis, start, stop, step}), name_, shape(like), dtype(g));
  }
  // A backward kind's node: its gradient has like's shape and dtype.
  int node(OpKind kind, std::vector<int> inputs, std::vector<int64_t> attrs, int like) {
    return node_with(kind, std::move(inputs), ints(std::move(attrs)), like);
  }
  int node_with(OpKind kind, std::vector<int> inputs, Attrs attrs, int like) {
    return g_.add_node(kind, std::move(inputs), std::move(attrs), name_, shape(like), dtype(like));
  }
  // A backward kind's node with one gradient output per value of `like` (none where it is -1).
  std::vector<int> multi_node(OpKind kind, std::vector<int> inputs, std::vector<int64_t> attrs,
                              const std::vector<int>& like) {
    const int index = int(g_.nodes().size());
    Node n{kind, std::move(inputs), {}, ints(std::move(attrs)), name_};
    for (int v : like) {
      n.outputs.push_back(v < 0 ? -1 : g_.add_value(shape(v), dtype(v), "d" + g_.value(v).name));
      if (v >= 0) g_.values()[size_t(n.outputs.back())].producer = index;
    }
    g_.nodes().push_back(std::move(n));
    return g_.nodes().back().outputs;
  }
  // A second output of forward node `node`, shaped like `like`: what the node keeps for its rule.
  int extra_output(int node, int like, const std::string& suffix) {
    int v = g_.add_value(shape(like), dtype(like), g_.nodes()[size_t(node)].name + suffix);
    g_.values()[size_t(v)].producer = node;
    g_.nodes()[size_t(node)].outputs.push_back(v);
    return v;
  }
  int index_select_grad(int g, int index, int like) {
    return g_.add_node(OpKind::IndexSelectGrad, {g, index, like}, {}, name_, shape(like), dtype(g));
  }

 private:
  static Attrs ints(std::vector<int64_t> v) {
    Attrs a;
    a.ints = std::move(v);
    return a;
  }
  int reduce(ReduceOp op, int x, const std::vector<int64_t>& axes, bool keepdims) {
    Attrs a = ints(axes);
    a.reduce = op;
    a.keepdims = keepdims;
    return g_.add_node(OpKind::Reduce, {x}, a, name_, ops::reduced_shape(shape(x), axes, keepdims), dtype(x));
  }
  Graph& g_;
  std::string name_;
};

// The input of `fwd` at optional slot `slot` (-1 where attrs.absent leaves it out).
int slot_input(const Node& fwd, size_t slot) {
  size_t at = 0;
  for (size_t k = 0; k < slot; ++k) at += !(fwd.attrs.absent >> k & 1u);
  return fwd.attrs.absent >> slot & 1u || at >= fwd.inputs.size() ? -1 : fwd.inputs[at];
}

int64_t wrap(int64_t axis, size_t ndim) { return wrap_axis(axis, int64_t(ndim), "backward"); }

// x's gradient through a matmul whose operand may be 1-D (ops::matmul views it as a matrix).
std::array<int, 2> matmul_grads(GraphAlgebra& k, int a, int b, int g, std::array<bool, 2> need) {
  const Shape sa = k.shape(a), sb = k.shape(b);
  int a2 = sa.size() == 1 ? k.reshape(a, {1, sa[0]}) : a;
  int b2 = sb.size() == 1 ? k.reshape(b, {sb[0], 1}) : b;
  Shape out = k.shape(g);
  if (sa.size() == 1) out.insert(out.end() - (sb.size() == 1 ? 0 : 1), 1);
  if (sb.size() == 1) out.push_back(1);
  auto [ga, gb] = ops::grad::matmul_rule(k, a2, b2, k.reshape(g, out), need);
  return {need[0] ? k.reshape(ga, sa) : -1, need[1] ? k.reshape(gb, sb) : -1};
}

// The gradients of fwd's logical inputs (absent optional ones included) where need says, as graph
// nodes; -1 elsewhere. Returns false for a kind without a graph rule.
bool graph_rule(GraphAlgebra& k, int node, const Node& fwd, int g, const std::vector<bool>& need,
                std::vector<int>& grads) {
  namespace R = ops::grad;
  const auto& I = fwd.attrs.ints;
  const auto& F = fwd.attrs.floats;
  const int out = fwd.outputs[0];
  const int x = fwd.inputs.empty() ? -1 : fwd.inputs[0];
  const size_t nd = x >= 0 ? k.shape(x).size() : 0;
  grads.assign(need.size(), -1);
  int& gx = grads[0];
  auto axes = [&] { return ops::normalize_axes(I, int64_t(nd), "backward"); };
  switch (fwd.kind) {
    case OpKind::Unary: gx = k.reduce_to(R::unary_rule(k, fwd.attrs.unary, x, out, g), x); break;
    case OpKind::Binary: {
      const int a = fwd.inputs[0], b = fwd.inputs[1];
      auto [ga, gb] = R::binary_rule(k, fwd.attrs.binary, a, b, out, g, {need[0], need[1]});
      if (need[0]) grads[0] = k.reduce_to(ga, a);
      if (need[1]) grads[1] = k.reduce_to(gb, b);
      break;
    }
    case OpKind::MatMul: {
      auto [ga, gb] = matmul_grads(k, fwd.inputs[0], fwd.inputs[1], g, {need[0], need[1]});
      grads = {ga, gb};
      break;
    }
    case OpKind::Where: {
      auto [ga, gb] = R::where_rule(k, fwd.inputs[0], fwd.inputs[1], fwd.inputs[2], g, {need[1], need[2]});
      grads = {-1, need[1] ? ga : -1, need[2] ? gb : -1};
      break;
    }
    case OpKind::Cast:
      if (is_floating(k.dtype(x)) && is_floating(k.dtype(out))) gx = k.cast_like(g, x);
      break;
    case OpKind::Contiguous: gx = g; break;
    case OpKind::Reshape: gx = k.reshape(g, k.shape(x)); break;
    case OpKind::Permute: {
      std::vector<int64_t> dims;
      for (int64_t d : I) dims.push_back(wrap(d, nd));
      gx = k.permute(g, R::inverse_permutation(dims));
      break;
    }
    case OpKind::Expand: gx = k.reduce_to(g, x); break;
    case OpKind::Slice: gx = k.slice_grad(g, x, I[0], I[1], I[2], I[3]); break;
    case OpKind::Select: {
      const int64_t axis = wrap(I[0], nd), index = I[1];
      gx = k.slice_grad(k.reshape(g, R::kept_shape(k.shape(x), {axis})), x, axis, index,
                        index == -1 ? INT64_MAX : index + 1, 1);
      break;
    }
    case OpKind::Unsqueeze: gx = k.select(g, wrap(I[0], nd + 1), 0); break;
    case OpKind::IndexSelect: gx = k.index_select_grad(g, fwd.inputs[1], x); break;
    case OpKind::Concat: {
      const int64_t axis = wrap(I[0], nd);
      std::vector<int64_t> lengths;
      for (int v : fwd.inputs) lengths.push_back(k.shape(v)[size_t(axis)]);
      NX_CHECK(std::count(lengths.begin(), lengths.end(), kBatch) == 0, "layer '", fwd.name,
               "' (concat): no gradient along the batch axis; concatenate along a feature axis");
      grads = R::concat_rule(k, g, lengths, axis, need);
      for (size_t i = 0; i < grads.size(); ++i)
        if (!need[i]) grads[i] = -1;
      break;
    }
    case OpKind::Stack:
      for (size_t i = 0; i < need.size(); ++i)
        if (need[i]) grads[i] = k.select(g, wrap(I[0], nd + 1), int64_t(i));
      break;
    case OpKind::Reduce: {
      const ops::Axes ax = axes();
      const bool keep = fwd.attrs.keepdims;
      gx = fwd.attrs.reduce == ReduceOp::Sum    ? R::sum_rule(k, x, g, ax, keep)
           : fwd.attrs.reduce == ReduceOp::Mean ? R::mean_rule(k, x, g, ax, keep)
                                                : R::extremum_rule(k, x, out, g, ax, keep);
      break;
    }
    case OpKind::LogSumExp: gx = R::logsumexp_rule(k, x, out, g, axes(), fwd.attrs.keepdims); break;
    case OpKind::Var: gx = R::var_rule(k, x, g, axes(), fwd.attrs.keepdims, F[0]); break;
    case OpKind::Softmax: gx = k.cast_like(R::softmax_rule(k, out, g, wrap(I[0], nd)), x); break;
    case OpKind::LogSoftmax: gx = k.cast_like(R::log_softmax_rule(k, out, g, wrap(I[0], nd)), x); break;
    case OpKind::LayerNorm: {
      const int w = slot_input(fwd, 1), b = slot_input(fwd, 2);
      std::vector<int64_t> ax;
      for (size_t d = nd - I.size(); d < nd; ++d) ax.push_back(int64_t(d));
      auto r = R::layer_norm_rule(k, x, w, b, w >= 0, g, ax, F[0], {need[0], need[1], need[2]});
      for (size_t i = 0; i < 3; ++i) grads[i] = need[i] ? r[i] : -1;
      break;
    }
    case OpKind::BatchNorm: {
      const int w = slot_input(fwd, 1), b = slot_input(fwd, 2);
      const bool training = I.empty() || I[0] != 0;  // the training pass, unless the node fixes it
      auto r = R::batch_norm_rule(k, x, w, b, w >= 0, slot_input(fwd, 3), slot_input(fwd, 4), training, g, F[1],
                                  {need[0], need[1], need[2]});
      for (size_t i = 0; i < 3; ++i) grads[i] = need[i] ? r[i] : -1;
      break;
    }
    case OpKind::BatchNormStats:  // the running stats are buffers: only x gets a gradient
      if (I.empty() || I[0] != 0) gx = R::batch_norm_stats_rule(k, x, out, g);  // else constants
      break;
    case OpKind::Dropout:  // dropout(x) = x * mask: the node hands its mask to the rule of mul
      if (I.empty() || I[0] != 0)
        gx = R::binary_rule(k, ops::BinaryOp::Mul, x, k.extra_output(node, x, ".mask"), out, g, {true, false})[0];
      else gx = g;  // fixed to inference: the identity
      break;
    case OpKind::MaxPool2d: gx = k.node(OpKind::MaxPool2dGrad, {g, x}, I, x); break;
    case OpKind::AvgPool2d: {
      std::vector<int64_t> window_and_size = I;
      window_and_size.insert(window_and_size.end(), {k.shape(x)[2], k.shape(x)[3]});
      gx = k.node(OpKind::AvgPool2dGrad, {g}, window_and_size, x);
      break;
    }
    case OpKind::CrossEntropy: gx = k.node_with(OpKind::CrossEntropyGrad, {g, x, fwd.inputs[1]}, fwd.attrs, x); break;
    case OpKind::Conv2d: {
      std::vector<int> like{x, fwd.inputs[1], slot_input(fwd, 2)};
      for (size_t i = 0; i < 3; ++i) like[i] = need[i] ? like[i] : -1;
      grads = k.multi_node(OpKind::Conv2dGrad, {g, x, fwd.inputs[1]}, I, like);
      break;
    }
    default: return false;
  }
  return true;
}

}  // namespace

void autodiff(Graph& g, bool constant_seed) {
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
  if (constant_seed && loss.shape.empty()) {
    Attrs one;
    one.floats = {1.0};
    contrib[g.loss] = {g.add_node(OpKind::Const, {}, one, "loss", {}, loss.dtype)};
  } else {
    contrib[g.loss] = {g.add_node(OpKind::OnesLike, {g.loss}, {}, "loss", loss.shape, loss.dtype)};
  }
  for (int i = n_forward - 1; i >= 0; --i) {
    Node fwd = g.nodes()[size_t(i)];  // copy: add_node may reallocate
    if (!differentiable(fwd) || !needs[size_t(fwd.outputs[0])]) continue;
    int gout = gradient_of(fwd.outputs[0], fwd.name);
    if (gout < 0) continue;  // does not reach the loss
    // The logical inputs (optional ones left out included) and which need a gradient.
    std::vector<int> slots;
    for (size_t k = 0; k < fwd.inputs.size() + size_t(std::popcount(fwd.attrs.absent)); ++k)
      slots.push_back(slot_input(fwd, k));
    std::vector<bool> need;
    for (int v : slots) need.push_back(v >= 0 && needs[size_t(v)]);
    GraphAlgebra k(g, fwd.name);
    std::vector<int> grads;
    const bool has_rule = graph_rule(k, i, fwd, gout, need, grads);
    NX_CHECK(has_rule, "layer '", fwd.name, "' (", kind_name(fwd.kind),
             "): no derivative for this kind of node; a trainable graph may use the ops GraphBuilder and "
             "nx.jit record");
    for (size_t s = 0; s < slots.size(); ++s)
      if (need[s] && grads[s] >= 0) contrib[slots[s]].push_back(grads[s]);
  }
  g.param_grads.clear();
  for (int p : g.params) g.param_grads.push_back(gradient_of(p, g.value(p).name));
  g.verify();
}

std::vector<bool> live_nodes(const Graph& g, const std::vector<int>& roots, int end) {
  std::vector<bool> need_value(g.values().size(), false), run(g.nodes().size(), false);
  for (int r : roots)
    if (r >= 0) need_value[size_t(r)] = true;
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
