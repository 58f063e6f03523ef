// The fusion pass. Nodes are visited in order; an elementwise node joins the open groups that
// produce its inputs when they share its iteration shape (merging them), else starts a group. A
// group closes once a node outside it reads one of its values (so no path can leave a group and
// come back: groups stay acyclic), or once a reduction joins it as its epilogue.
#include "graph/passes/fuse.h"

#include <algorithm>
#include <numeric>

#include "base/error.h"

namespace nexus::graph {
namespace {

struct Building {
  std::vector<int> nodes;
  bool open = true;
  bool reduced = false;
  bool alive = true;
  Shape shape;
};

std::string node_label(const Graph& g, int i) {
  const Node& n = g.nodes()[size_t(i)];
  std::string s = str("node ", i, " (", kind_name(n.kind));
  if (n.kind == OpKind::Unary) s += str(".", ops::op_name(n.attrs.unary));
  if (n.kind == OpKind::Binary) s += str(".", ops::op_name(n.attrs.binary));
  return s + ")";
}

}  // namespace

bool is_fusable_elementwise(OpKind k) {
  return k == OpKind::Unary || k == OpKind::Binary || k == OpKind::Where || k == OpKind::Cast;
}

int64_t fused_bytes(const Graph& g, const FusionGroup& group, int64_t batch) {
  int64_t b = 0;
  for (int v : group.inputs) b += g.value_bytes(v, batch);
  for (int v : group.outputs) b += g.value_bytes(v, batch);
  return b;
}

int64_t unfused_bytes(const Graph& g, const FusionGroup& group, int64_t batch) {
  int64_t b = 0;
  for (int m : group.nodes) b += g.node_bytes(g.nodes()[size_t(m)], batch);
  return b;
}

bool reduction_with_side_outputs(ReduceOp reduce, DType dtype, const std::vector<int64_t>& axes, int64_t ndim) {
  const bool adds = reduce == ReduceOp::Sum || reduce == ReduceOp::Mean;
  if (!adds || !is_floating(dtype) || axes.empty() || int64_t(axes.size()) >= ndim) return false;
  for (size_t k = 0; k < axes.size(); ++k)
    if (axes[k] != int64_t(k)) return false;
  return true;
}

FusionPlan partition(const Graph& g, const std::vector<int>& roots_in, int begin, int end) {
  const auto& nodes = g.nodes();
  if (end < 0) end = int(nodes.size());
  FusionPlan plan;
  std::vector<Building> groups;
  std::vector<int> group_of(nodes.size(), -1);
  auto producer = [&](int v) { return g.value(v).producer; };
  auto is_const = [&](int v) { int p = producer(v); return p >= 0 && nodes[size_t(p)].kind == OpKind::Const; };
  auto group_of_value = [&](int v) { int p = producer(v); return p >= 0 ? group_of[size_t(p)] : -1; };

  for (int i = begin; i < end; ++i) {
    const Node& n = nodes[size_t(i)];
    if (is_fusable_elementwise(n.kind)) {
      const Shape& shape = g.value(n.outputs[0]).shape;
      std::vector<int> join;
      for (int v : n.inputs) {
        int gi = group_of_value(v);
        if (gi < 0 || is_const(v) || std::count(join.begin(), join.end(), gi)) continue;
        Building& b = groups[size_t(gi)];
        if (!b.open) {
          plan.refusals.push_back(str("cannot fuse ", node_label(g, i), " with group ", gi, ": ",
                                      b.reduced ? "the group ends in a reduction" : "a value of the group is read by a node outside it first"));
        } else if (b.shape != shape) {
          plan.refusals.push_back(str("cannot fuse ", node_label(g, i), " with group ", gi, ": its shape ",
                                      shape_str(shape), " differs from the group's ", shape_str(b.shape)));
        } else {
          join.push_back(gi);
        }
      }
      int target;
      if (join.empty()) {
        target = int(groups.size());
        groups.push_back(Building{{}, true, false, true, shape});
      } else {
        target = join[0];
        for (size_t k = 1; k < join.size(); ++k) {  // merge the others into the first
          Building& o = groups[size_t(join[k])];
          for (int m : o.nodes) group_of[size_t(m)] = target;
          auto& t = groups[size_t(target)].nodes;
          t.insert(t.end(), o.nodes.begin(), o.nodes.end());
          o.nodes.clear();
          o.alive = false;
        }
      }
      groups[size_t(target)].nodes.push_back(i);
      group_of[size_t(i)] = target;
    } else if (n.kind == OpKind::Reduce && !n.inputs.empty()) {
      int gi = group_of_value(n.inputs[0]);
      const Value& in = g.value(n.inputs[0]);
      const bool bool_extremum = in.dtype == DType::Bool && is_extremum(n.attrs.reduce);
      if (gi >= 0 && groups[size_t(gi)].open && groups[size_t(gi)].shape == in.shape && !bool_extremum) {
        groups[size_t(gi)].nodes.push_back(i);
        groups[size_t(gi)].reduced = true;
        groups[size_t(gi)].open = false;
        group_of[size_t(i)] = gi;
      } else if (gi >= 0) {
        plan.refusals.push_back(str("cannot fuse ", node_label(g, i), " into group ", gi, ": ",
                                    bool_extremum ? "max/min of bool is not fused" : "the group is closed or has another shape"));
      }
    }
    // A read from outside closes the group that produced the value.
    for (int v : n.inputs) {
      int gi = group_of_value(v);
      if (gi >= 0 && gi != group_of[size_t(i)]) groups[size_t(gi)].open = false;
    }
  }

  // Which values are read outside their group (or are roots).
  std::vector<int> roots = roots_in;
  if (g.output >= 0) roots.push_back(g.output);
  if (g.loss >= 0) roots.push_back(g.loss);
  std::vector<bool> used_outside(g.values().size(), false);
  for (int v : roots) used_outside[size_t(v)] = true;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (int v : nodes[i].inputs) {
      int gi = group_of_value(v);
      if (gi >= 0 && gi != group_of[i]) used_outside[size_t(v)] = true;
    }
  // A reduction epilogue is its group's only output, unless it is a floating sum or mean over
  // leading axes (a bias gradient): that kernel also stores the others, row by row.
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    Building& b = groups[gi];
    if (!b.alive || !b.reduced) continue;
    int red = b.nodes.back();
    bool other = false;
    for (int m : b.nodes)
      if (m != red && used_outside[size_t(nodes[size_t(m)].outputs[0])]) other = true;
    const Node& rn = nodes[size_t(red)];
    const Value& in = g.value(rn.inputs[0]);
    if (other && !reduction_with_side_outputs(rn.attrs.reduce, in.dtype, rn.attrs.ints, int64_t(in.shape.size()))) {
      plan.refusals.push_back(str("cannot fuse ", node_label(g, red), " into group ", gi,
                                  ": other values of the group are used outside it (only a floating sum or mean "
                                  "over leading axes also stores elementwise outputs)"));
      b.nodes.pop_back();
      b.reduced = false;
      group_of[size_t(red)] = -1;
      used_outside[size_t(nodes[size_t(red)].inputs[0])] = true;
    }
  }

  for (size_t gi = 0; gi < groups.size(); ++gi) {
    Building& b = groups[gi];
    if (!b.alive || b.nodes.empty()) continue;
    std::sort(b.nodes.begin(), b.nodes.end());
    FusionGroup fg;
    fg.nodes = b.nodes;
    for (int m : b.nodes) {
      const Node& n = nodes[size_t(m)];
      for (int v : n.inputs) {
        if (is_const(v)) {
          if (!std::count(fg.consts.begin(), fg.consts.end(), v)) fg.consts.push_back(v);
          continue;
        }
        fg.bytes_unfused += g.value_bytes(v, 1);
        if (group_of_value(v) == int(gi) || std::count(fg.inputs.begin(), fg.inputs.end(), v)) continue;
        fg.inputs.push_back(v);
        fg.bytes_fused += g.value_bytes(v, 1);
        int p = producer(v);
        if (p >= 0 && m == b.nodes[0] &&
            (nodes[size_t(p)].kind == OpKind::MatMul || nodes[size_t(p)].kind == OpKind::Conv2d))
          fg.anchor = p;
      }
      int out = n.outputs[0];
      fg.bytes_unfused += g.value_bytes(out, 1);
      if (used_outside[size_t(out)]) {
        fg.outputs.push_back(out);
        fg.bytes_fused += g.value_bytes(out, 1);
      }
    }
    if (fg.outputs.empty()) continue;  // dead code: nothing reads it
    plan.groups.push_back(std::move(fg));
  }
  return plan;
}

}  // namespace nexus::graph
