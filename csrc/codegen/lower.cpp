#include "codegen/lower.h"

#include <algorithm>
#include <map>

#include "base/error.h"
#include "ops/ops.h"

namespace nexus::codegen {
namespace {

using graph::Node;
using graph::OpKind;

class Lowering {
 public:
  explicit Lowering(const graph::Graph& g) : g_(g) {}

  Lowered run(const graph::FusionGroup& grp) {
    for (int v : grp.inputs) {
      out_.kernel.inputs.push_back(g_.value(v).dtype);
      reg_[v] = emit({InstrOp::Load, g_.value(v).dtype, int(out_.kernel.inputs.size()) - 1});
    }
    for (int v : grp.consts) {
      const Node& n = g_.nodes()[size_t(g_.value(v).producer)];
      NX_ASSERT(!n.attrs.floats.empty(), "const node without a value");
      out_.kernel.const_dtypes.push_back(g_.value(v).dtype);
      out_.consts.push_back(n.attrs.floats[0]);
      reg_[v] = emit({InstrOp::Const, g_.value(v).dtype, out_.kernel.num_consts++});
    }
    std::vector<int> members = grp.recomputed;  // both in graph order, merged: inputs come first
    members.insert(members.end(), grp.nodes.begin(), grp.nodes.end());
    std::sort(members.begin(), members.end());
    for (int i : members) node(g_.nodes()[size_t(i)]);
    // Only a reduction's axes refer to the rank; elementwise kernels serve every rank.
    if (out_.kernel.has_reduce())
      out_.kernel.ndim = int(g_.value(g_.nodes()[size_t(grp.nodes[0])].outputs[0]).shape.size());
    // Every output but the reduction's (which has no register, and comes last) is elementwise.
    for (int v : grp.outputs)
      if (reg_.count(v)) out_.kernel.outputs.push_back(reg_.at(v));
    out_.kernel.verify();
    return std::move(out_);
  }

 private:
  int emit(Instr in) {
    out_.kernel.instrs.push_back(in);
    return int(out_.kernel.instrs.size()) - 1;
  }
  DType dt(int r) const { return out_.kernel.instrs[size_t(r)].dtype; }
  int cast(int r, DType to) { return dt(r) == to ? r : emit({InstrOp::Cast, to, r}); }

  void node(const Node& n) {
    const int out = n.outputs[0];
    const DType want = g_.value(out).dtype;
    auto in = [&](size_t k) { return reg_.at(n.inputs.at(k)); };
    int r = -1;
    switch (n.kind) {
      case OpKind::Unary: {
        const int x = in(0);
        const DType t = ops::unary_result_dtype(n.attrs.unary, dt(x));
        const DType c = compute_dtype(t);
        Instr u{InstrOp::Unary, c, cast(x, c)};
        u.unary = n.attrs.unary;
        r = cast(emit(u), t);
        break;
      }
      case OpKind::Binary: {
        const ops::BinaryOp op = n.attrs.binary;
        const DType t = ops::binary_common_dtype(op, dt(in(0)), dt(in(1)));
        const DType c = compute_dtype(t);
        Instr b{InstrOp::Binary, ops::is_comparison(op) ? DType::Bool : c, cast(in(0), c), cast(in(1), c)};
        b.binary = op;
        r = emit(b);
        if (!ops::is_comparison(op)) r = cast(r, t);
        break;
      }
      case OpKind::Where: {
        const DType t = promote_types(dt(in(1)), dt(in(2)));
        const DType c = compute_dtype(t);
        r = cast(emit({InstrOp::Where, c, cast(in(0), DType::Bool), cast(in(1), c), cast(in(2), c)}), t);
        break;
      }
      case OpKind::Cast: r = cast(in(0), want); break;
      case OpKind::Reduce: {
        Reduction& red = out_.kernel.reduce;
        red.kind = n.attrs.reduce;
        NX_ASSERT(red.kind != ReduceOp::None, "a Reduce node without an op");
        red.axes = n.attrs.ints;
        red.keepdims = n.attrs.keepdims;
        int x = in(0);
        DType t = dt(x);
        if (red.kind == ReduceOp::Mean && !is_floating(t)) x = cast(x, t = DType::Float32);
        const DType c = red.kind == ReduceOp::Sum && !is_floating(t) ? DType::Int64 : compute_dtype(t);
        red.reg = cast(x, c);
        red.dtype = reduce_result_dtype(red.kind, t);
        NX_ASSERT(red.dtype == want, "reduce lowering gives ", dtype_name(red.dtype), ", the graph says ",
                  dtype_name(want));
        return;
      }
      default: NX_ASSERT(false, "node kind ", graph::kind_name(n.kind), " in a fusion group");
    }
    NX_ASSERT(dt(r) == want, "lowering ", graph::kind_name(n.kind), " gives ", dtype_name(dt(r)), ", the graph says ",
              dtype_name(want));
    reg_[out] = r;
  }

  const graph::Graph& g_;
  Lowered out_;
  std::map<int, int> reg_;  // value id -> register
};

}  // namespace

Lowered lower(const graph::Graph& g, const graph::FusionGroup& group) {
  NX_ASSERT(!group.nodes.empty(), "lowering an empty fusion group");
  return Lowering(g).run(group);
}

CompiledPlan compile_plan(const graph::Graph& g, const std::vector<int>& roots, int begin, int end, bool whole_graph) {
  graph::FusionPlan plan = graph::partition(g, roots, begin, end, whole_graph);
  CompiledPlan out;
  out.refusals = std::move(plan.refusals);
  for (graph::FusionGroup& grp : plan.groups) {
    Lowered l = lower(g, grp);
    out.groups.push_back(CompiledGroup{std::move(grp), get_program(l.kernel), std::move(l.consts)});
  }
  return out;
}

}  // namespace nexus::codegen
