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
  std::vector<int> copies;  // nodes of other groups this one recomputes
  int reduce = -1;          // the reduction node
  bool sides = false;       // a full floating sum/mean (whole_graph): later independent nodes may join
  bool read = false;        // a node outside has read one of its values (it must run before that node)
};

std::string node_label(const Graph& g, int i) {
  const Node& n = g.nodes()[size_t(i)];
  std::string s = str("node ", i, " (", kind_name(n.kind));
  if (n.kind == OpKind::Unary) s += str(".", ops::op_name(n.attrs.unary));
  if (n.kind == OpKind::Binary) s += str(".", ops::op_name(n.attrs.binary));
  return s + ")";
}

// The groups being built, node by node, then turned into the plan's FusionGroups.
class Partitioner {
 public:
  Partitioner(const Graph& g, bool whole_graph)
      : g_(g), nodes_(g.nodes()), group_of_(nodes_.size(), -1), whole_graph_(whole_graph) {}

  void visit(int i);
  std::vector<bool> used_outside(std::vector<int> roots) const;
  void split_epilogues_read_outside(std::vector<bool>& used_outside);
  FusionPlan finish(const std::vector<bool>& used_outside);

 private:
  int producer(int v) const { return g_.value(v).producer; }
  bool is_const(int v) const {
    const int p = producer(v);
    return p >= 0 && nodes_[size_t(p)].kind == OpKind::Const;
  }
  int group_of_value(int v) const {
    const int p = producer(v);
    return p >= 0 ? group_of_[size_t(p)] : -1;
  }
  // Is value v computed inside group gi (by a member, or a member recomputed there)?
  bool inside(int v, int gi) const {
    const int p = producer(v);
    if (p < 0 || gi < 0) return false;
    const auto& c = groups_[size_t(gi)].copies;
    return group_of_[size_t(p)] == gi || std::count(c.begin(), c.end(), p);
  }
  std::vector<int> recompute_chain(int v, const Shape& shape) const;
  bool reads_result_of(int i, int red) const;
  void add_elementwise(int i);
  std::vector<int> joinable_groups(int i, const Shape& shape);
  int merge_groups(const std::vector<int>& join, const Shape& shape);
  void add_reduction(int i);
  void close_groups_read_by(int i);
  FusionGroup emit(size_t gi, const std::vector<bool>& used_outside) const;

  const Graph& g_;
  const std::vector<Node>& nodes_;
  std::vector<Building> groups_;
  std::vector<int> group_of_;  // per node
  FusionPlan plan_;
  const bool whole_graph_;
  std::vector<int> pending_;  // the chains node i recomputes (joinable_groups), for its group
};

// The nodes to run again to have value v at `shape` without reading it: v's producer and the
// members of its group it depends on, when that group ended in a reduction, every one is an
// elementwise op of `shape`, there are at most kMaxRecomputed of them and what they read from
// outside the group is a graph input, parameter, buffer or constant. Empty when not.
std::vector<int> Partitioner::recompute_chain(int v, const Shape& shape) const {
  const int gi = group_of_value(v);
  if (!whole_graph_ || gi < 0 || !groups_[size_t(gi)].reduced || groups_[size_t(gi)].shape != shape) return {};
  std::vector<int> chain, todo{producer(v)};
  while (!todo.empty()) {
    const int p = todo.back();
    todo.pop_back();
    if (std::count(chain.begin(), chain.end(), p)) continue;
    const Node& n = nodes_[size_t(p)];
    if (!is_fusable_elementwise(n.kind) || g_.value(n.outputs[0]).shape != shape) return {};
    chain.push_back(p);
    if (chain.size() > kMaxRecomputed) return {};
    for (int in : n.inputs) {
      const int q = producer(in);
      if (q >= 0 && group_of_[size_t(q)] == gi) {
        todo.push_back(q);
        continue;
      }
      const OpKind k = q >= 0 ? nodes_[size_t(q)].kind : OpKind::Input;
      if (k != OpKind::Input && k != OpKind::Param && k != OpKind::Buffer && k != OpKind::Const) return {};
    }
  }
  return chain;
}

// Does node i depend on the value node `red` produces (through any path)?
bool Partitioner::reads_result_of(int i, int red) const {
  std::vector<int> todo{i}, seen;
  while (!todo.empty()) {
    const int m = todo.back();
    todo.pop_back();
    for (int v : nodes_[size_t(m)].inputs) {
      const int p = producer(v);
      if (p == red) return true;
      if (p > red && !std::count(seen.begin(), seen.end(), p)) {  // earlier nodes cannot read it
        seen.push_back(p);
        todo.push_back(p);
      }
    }
  }
  return false;
}

void Partitioner::visit(int i) {
  const Node& n = nodes_[size_t(i)];
  if (is_fusable_elementwise(n.kind)) add_elementwise(i);
  else if (n.kind == OpKind::Reduce && !n.inputs.empty()) add_reduction(i);
  close_groups_read_by(i);
}

void Partitioner::add_elementwise(int i) {
  const Shape& shape = g_.value(nodes_[size_t(i)].outputs[0]).shape;
  pending_.clear();
  const int target = merge_groups(joinable_groups(i, shape), shape);
  Building& b = groups_[size_t(target)];
  b.nodes.push_back(i);
  group_of_[size_t(i)] = target;
  for (int p : pending_)
    if (!std::count(b.copies.begin(), b.copies.end(), p) && group_of_[size_t(p)] != target) b.copies.push_back(p);
}

// The open groups of `shape` that produce node i's inputs; a refusal for each other one.
std::vector<int> Partitioner::joinable_groups(int i, const Shape& shape) {
  std::vector<int> join;
  for (int v : nodes_[size_t(i)].inputs) {
    const int gi = group_of_value(v);
    if (gi < 0 || is_const(v) || std::count(join.begin(), join.end(), gi)) continue;
    const Building& b = groups_[size_t(gi)];
    const bool joined_reduced =
        std::any_of(join.begin(), join.end(), [&](int g) { return groups_[size_t(g)].reduced; });
    if (!b.open && b.sides && !b.read && b.shape == shape && !joined_reduced && !reads_result_of(i, b.reduce)) {
      join.insert(join.begin(), gi);  // a side node of the loss's kernel: merge into it
      continue;
    }
    if (!b.open) {
      if (const std::vector<int> chain = recompute_chain(v, shape); !chain.empty()) {
        pending_.insert(pending_.end(), chain.begin(), chain.end());
        continue;
      }
      plan_.refusals.push_back(
          str("cannot fuse ", node_label(g_, i), " with group ", gi, ": ",
              b.reduced ? "the group ends in a reduction" : "a value of the group is read by a node outside it first"));
    } else if (b.shape != shape) {
      plan_.refusals.push_back(str("cannot fuse ", node_label(g_, i), " with group ", gi, ": its shape ",
                                   shape_str(shape), " differs from the group's ", shape_str(b.shape)));
    } else {
      join.push_back(gi);
    }
  }
  return join;
}

// Merges the groups `join` into the first of them (a new group when there is none); returns it.
int Partitioner::merge_groups(const std::vector<int>& join, const Shape& shape) {
  if (join.empty()) {
    groups_.push_back(Building{{}, true, false, true, shape});
    return int(groups_.size()) - 1;
  }
  const int target = join[0];
  for (size_t k = 1; k < join.size(); ++k) {
    Building& o = groups_[size_t(join[k])];
    for (int m : o.nodes) group_of_[size_t(m)] = target;
    auto& t = groups_[size_t(target)].nodes;
    t.insert(t.end(), o.nodes.begin(), o.nodes.end());
    auto& c = groups_[size_t(target)].copies;
    for (int p : o.copies)  // a copy of the target's own node is the node itself
      if (!std::count(c.begin(), c.end(), p) && group_of_[size_t(p)] != target) c.push_back(p);
    o.nodes.clear();
    o.copies.clear();
    o.alive = false;
  }
  return target;
}

// A reduction closes the open group of its input's shape as its epilogue.
void Partitioner::add_reduction(int i) {
  const Node& n = nodes_[size_t(i)];
  const int gi = group_of_value(n.inputs[0]);
  if (gi < 0) return;
  const Value& in = g_.value(n.inputs[0]);
  const bool bool_extremum = in.dtype == DType::Bool && is_extremum(n.attrs.reduce);
  Building& b = groups_[size_t(gi)];
  if (b.open && b.shape == in.shape && !bool_extremum) {
    b.nodes.push_back(i);
    b.reduced = true;
    b.open = false;
    b.reduce = i;
    const int64_t ndim = int64_t(in.shape.size());
    b.sides = whole_graph_ && reduces_every_axis(n.attrs.ints, ndim) &&
              reduction_with_side_outputs(n.attrs.reduce, in.dtype, n.attrs.ints, ndim);
    group_of_[size_t(i)] = gi;
  } else {
    plan_.refusals.push_back(
        str("cannot fuse ", node_label(g_, i), " into group ", gi, ": ",
            bool_extremum ? "max/min of bool is not fused" : "the group is closed or has another shape"));
  }
}

// A read from outside closes the group that produced the value.
void Partitioner::close_groups_read_by(int i) {
  for (int v : nodes_[size_t(i)].inputs) {
    const int gi = group_of_value(v);
    if (gi >= 0 && gi != group_of_[size_t(i)]) groups_[size_t(gi)].open = false, groups_[size_t(gi)].read = true;
  }
}

// Per value: read outside its group, or a root (`roots`, g.output, g.loss).
std::vector<bool> Partitioner::used_outside(std::vector<int> roots) const {
  if (g_.output >= 0) roots.push_back(g_.output);
  if (g_.loss >= 0) roots.push_back(g_.loss);
  std::vector<bool> used(g_.values().size(), false);
  for (int v : roots) used[size_t(v)] = true;
  for (size_t i = 0; i < nodes_.size(); ++i)
    for (int v : nodes_[i].inputs) {
      const int gi = group_of_value(v);
      if (gi >= 0 && gi != group_of_[i] && !inside(v, group_of_[i])) used[size_t(v)] = true;
    }
  return used;
}

// A reduction epilogue is its group's only output, unless it is a floating sum or mean that
// stores the others as it reads (reduction_with_side_outputs). Any other
// epilogue whose group has outside readers leaves the group (its input becomes an output).
void Partitioner::split_epilogues_read_outside(std::vector<bool>& used_outside) {
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    Building& b = groups_[gi];
    if (!b.alive || !b.reduced) continue;
    const int red = b.reduce;
    bool other = false;
    for (int m : b.nodes)
      if (m != red && used_outside[size_t(nodes_[size_t(m)].outputs[0])]) other = true;
    const Node& rn = nodes_[size_t(red)];
    const Value& in = g_.value(rn.inputs[0]);
    if (!other || reduction_with_side_outputs(rn.attrs.reduce, in.dtype, rn.attrs.ints, int64_t(in.shape.size())))
      continue;
    plan_.refusals.push_back(str("cannot fuse ", node_label(g_, red), " into group ", gi,
                                 ": other values of the group are used outside it (only a floating sum or mean "
                                 "over leading axes, or over axes that include the last, also stores "
                                 "elementwise outputs)"));
    NX_ASSERT(b.nodes.back() == red, "a reduction with side nodes after it is a full sum or mean");
    b.nodes.pop_back();
    b.reduced = false;
    b.reduce = -1;
    group_of_[size_t(red)] = -1;
    used_outside[size_t(rn.inputs[0])] = true;
  }
}

FusionPlan Partitioner::finish(const std::vector<bool>& used_outside) {
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    Building& b = groups_[gi];
    if (!b.alive || b.nodes.empty()) continue;
    std::sort(b.nodes.begin(), b.nodes.end());
    FusionGroup fg = emit(gi, used_outside);
    if (fg.outputs.empty()) continue;  // dead code: nothing reads it
    plan_.groups.push_back(std::move(fg));
  }
  return std::move(plan_);
}

// Group gi's inputs, inlined constants, outputs, GEMM anchor and traffic.
FusionGroup Partitioner::emit(size_t gi, const std::vector<bool>& used_outside) const {
  FusionGroup fg;
  fg.nodes = groups_[gi].nodes;
  fg.recomputed = groups_[gi].copies;
  std::sort(fg.recomputed.begin(), fg.recomputed.end());
  std::vector<int> members = fg.recomputed;  // in graph order: a copy precedes what reads it
  members.insert(members.end(), fg.nodes.begin(), fg.nodes.end());
  std::sort(members.begin(), members.end());
  for (int m : members) {
    const Node& n = nodes_[size_t(m)];
    const bool copy = group_of_[size_t(m)] != int(gi);  // its home group counts its own traffic
    for (int v : n.inputs) {
      if (is_const(v)) {
        if (!std::count(fg.consts.begin(), fg.consts.end(), v)) fg.consts.push_back(v);
        continue;
      }
      if (!copy) fg.bytes_unfused += g_.value_bytes(v, 1);
      if (inside(v, int(gi)) || std::count(fg.inputs.begin(), fg.inputs.end(), v)) continue;
      fg.inputs.push_back(v);
      fg.bytes_fused += g_.value_bytes(v, 1);
      const int p = producer(v);
      if (p >= 0 && m == fg.nodes[0] &&
          (nodes_[size_t(p)].kind == OpKind::MatMul || nodes_[size_t(p)].kind == OpKind::Conv2d))
        fg.anchor = p;
    }
    const int out = n.outputs[0];
    if (copy) continue;
    fg.bytes_unfused += g_.value_bytes(out, 1);
    if (used_outside[size_t(out)] && m != groups_[gi].reduce) {
      fg.outputs.push_back(out);
      fg.bytes_fused += g_.value_bytes(out, 1);
    }
  }
  // The reduction's value comes last: the kernel always produces it (after any side outputs).
  if (const int red = groups_[gi].reduce; red >= 0) {
    const int out = nodes_[size_t(red)].outputs[0];
    if (used_outside[size_t(out)] || !fg.outputs.empty()) {
      fg.outputs.push_back(out);
      fg.bytes_fused += g_.value_bytes(out, 1);
    }
  }
  return fg;
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
  if (!adds || !is_floating(dtype)) return false;
  // chunk by chunk along the innermost axis: every axis, or any that include the last one
  if (reduces_every_axis(axes, ndim) || std::count(axes.begin(), axes.end(), ndim - 1)) return true;
  for (size_t k = 0; k < axes.size(); ++k)
    if (axes[k] != int64_t(k)) return false;
  return true;
}

FusionPlan partition(const Graph& g, const std::vector<int>& roots, int begin, int end, bool whole_graph) {
  if (end < 0) end = int(g.nodes().size());
  Partitioner p(g, whole_graph);
  for (int i = begin; i < end; ++i) p.visit(i);
  std::vector<bool> used_outside = p.used_outside(roots);
  p.split_epilogues_read_outside(used_outside);
  return p.finish(used_outside);
}

}  // namespace nexus::graph
