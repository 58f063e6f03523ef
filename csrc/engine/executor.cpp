#include "engine/executor.h"

#include <algorithm>
#include <climits>

#include "base/thread_pool.h"
#include "graph/passes/passes.h"

#include "ops/derivatives.h"
#include "ops/ops.h"
#include "tensor/tape.h"

namespace nexus::engine {

using graph::kBatch;
using graph::Node;
using graph::OpKind;

static Tensor opt(const std::vector<Tensor>& in, size_t i) { return i < in.size() ? in[i] : Tensor(); }

std::vector<Tensor> with_absent(const Node& n, std::vector<Tensor> present) {
  if (n.attrs.absent == 0) return present;
  std::vector<Tensor> in;
  size_t next = 0;
  for (uint32_t k = 0; next < present.size(); ++k) {
    if (k < 32 && (n.attrs.absent >> k & 1u)) in.emplace_back();
    else in.push_back(std::move(present[next++]));
  }
  return in;
}

std::vector<Tensor> node_inputs(const Node& n, const std::vector<Tensor>& env) {
  std::vector<Tensor> present;
  present.reserve(n.inputs.size());
  for (int v : n.inputs) present.push_back(env[size_t(v)]);
  return with_absent(n, std::move(present));
}

Tensor run_forward_node(const Node& n, const std::vector<Tensor>& in, bool training) {
  const auto& I = n.attrs.ints;
  const auto& F = n.attrs.floats;
  switch (n.kind) {
    case OpKind::Unary: return ops::unary(n.attrs.unary, in[0]);
    case OpKind::Binary: return ops::binary(n.attrs.binary, in[0], in[1]);
    case OpKind::MatMul:  // ints[0], when there: an epilogue folded in (graph::fold_epilogues)
      if (!I.empty()) return ops::matmul_epilogue(in[0], in[1], opt(in, 2), (I[0] & graph::kEpilogueRelu) != 0);
      return ops::matmul(in[0], in[1]);
    case OpKind::Reshape: {
      Shape shape(I.begin(), I.end());
      if (!shape.empty() && shape[0] == kBatch) shape[0] = in[0].shape()[0];
      return ops::reshape(in[0], shape);
    }
    case OpKind::Conv2d:  // ints[5], when there: an epilogue folded in (graph::fold_epilogues)
      if (I.size() > 5)
        return ops::conv2d_epilogue(in[0], in[1], opt(in, 2), I[0], I[1], I[2], I[3], I[4], opt(in, 3),
                                    (I[5] & graph::kEpilogueRelu) != 0);
      return ops::conv2d(in[0], in[1], opt(in, 2), I[0], I[1], I[2], I[3], I[4]);
    case OpKind::MaxPool2d: return ops::max_pool2d(in[0], I[0], I[1], I[2], I[3]);
    case OpKind::AvgPool2d: return ops::avg_pool2d(in[0], I[0], I[1], I[2], I[3]);
    // Dropout, BatchNorm and BatchNormStats follow the pass's mode unless the node fixes it (ints[0], nx.jit).
    case OpKind::Dropout: return ops::dropout(in[0], F[0], I.empty() ? training : I[0] != 0);
    case OpKind::BatchNorm:  // inputs: x, weight, bias, running_mean, running_var
      return ops::batch_norm(in[0], opt(in, 3), opt(in, 4), opt(in, 1), opt(in, 2), I.empty() ? training : I[0] != 0,
                             F[0], F[1]);
    case OpKind::BatchNormStats:  // inputs: x, running_mean, running_var
      return ops::batch_norm_stats(in[0], opt(in, 1), opt(in, 2), I.empty() ? training : I[0] != 0, F[0], F[1]);
    case OpKind::LayerNorm: return ops::layer_norm(in[0], Shape(I.begin(), I.end()), opt(in, 1), opt(in, 2), F[0]);
    case OpKind::Softmax: return ops::softmax(in[0], I[0]);
    case OpKind::LogSoftmax: return ops::log_softmax(in[0], I[0]);
    case OpKind::CrossEntropy: return ops::cross_entropy(in[0], in[1], n.attrs.reduce);
    case OpKind::Concat: return ops::concat(in, I[0]);
    case OpKind::Where: return ops::where(in[0], in[1], in[2]);
    case OpKind::Reduce: return ops::reduce(n.attrs.reduce, in[0], I, n.attrs.keepdims);
    case OpKind::Permute: return ops::permute(in[0], I);
    case OpKind::Expand: return ops::expand(in[0], in.size() > 1 ? in[1].shape() : Shape(I.begin(), I.end()));
    case OpKind::Slice: return ops::slice(in[0], I[0], I[1], I[2], I[3]);
    case OpKind::Select: return ops::select(in[0], I[0], I[1]);
    case OpKind::Unsqueeze: return ops::unsqueeze(in[0], I[0]);
    case OpKind::IndexSelect: return ops::index_select(in[0], in[1]);
    case OpKind::Stack: return ops::stack(in, I[0]);
    case OpKind::Contiguous: return ops::contiguous(in[0], I[0] != 0);
    case OpKind::Argmax:  // ints: keepdims[, axis]
      return ops::argmax(in[0], I.size() > 1 ? std::optional<int64_t>(I[1]) : std::nullopt, I[0] != 0);
    case OpKind::Var: return ops::var(in[0], I, n.attrs.keepdims, int64_t(F[0]));
    case OpKind::LogSumExp: return ops::logsumexp(in[0], I, n.attrs.keepdims);
    case OpKind::Detach: return in[0].detach();
    case OpKind::SliceGrad: return ops::grad::slice_grad(in[0], in[1].shape(), I[0], I[1], I[2], I[3]);
    case OpKind::IndexSelectGrad: return ops::grad::index_select_grad(in[0], in[1], in[2].shape());
    case OpKind::MaxPool2dGrad: return ops::grad::max_pool2d_grad(in[0], in[1], I);
    case OpKind::AvgPool2dGrad: return ops::grad::avg_pool2d_grad(in[0], I);
    case OpKind::CrossEntropyGrad: return ops::grad::cross_entropy_grad(in[0], in[1], in[2], n.attrs.reduce);
    default: break;
  }
  NX_ASSERT(false, "no forward rule for node kind ", graph::kind_name(n.kind));
  return {};
}

bool typed(OpKind k) {
  return k == OpKind::Const || k == OpKind::Cast || k == OpKind::Fill || k == OpKind::Arange || k == OpKind::Rand ||
         k == OpKind::Randn;
}

Tensor run_typed_node(const Node& n, const std::vector<Tensor>& in, const graph::Value& v, Device device) {
  const auto& F = n.attrs.floats;
  switch (n.kind) {
    case OpKind::Const: return ops::full({}, F.at(0), v.dtype);
    case OpKind::Fill: return ops::full(v.shape, F.at(0), v.dtype, device);
    case OpKind::Arange: return ops::to_device(ops::arange(F.at(0), F.at(1), F.at(2), v.dtype), device);
    case OpKind::Rand: return ops::to_device(ops::rand(v.shape, v.dtype), device);
    case OpKind::Randn: return ops::to_device(ops::randn(v.shape, v.dtype), device);
    default: break;
  }
  autograd::NoGradGuard no_grad;  // autodiff differentiates the graph, never this tape
  return ops::astype(in.at(0), v.dtype);
}

// The values a pass hands back besides output and loss: the parameters' gradients.
static std::vector<int> grad_roots(const graph::Graph& g) {
  std::vector<int> roots;
  for (int v : g.param_grads)
    if (v >= 0) roots.push_back(v);
  return roots;
}

GraphKernels::GraphKernels(const graph::Graph& g, const std::vector<int>& roots, Device device)
    : group_of(g.nodes().size(), -1) {
  // One plan for the whole graph (nx.jit): a loss's backward recomputes its forward chain.
  plan = codegen::compile_plan(g, roots, 0, int(g.nodes().size()), /*whole_graph=*/true);
  index(device);
}

void GraphKernels::index(Device device) {
  // A group of one op reads and writes what the op does: it runs as the op (nothing to compile).
  std::erase_if(plan.groups, [](const codegen::CompiledGroup& grp) {
    return grp.group.nodes.size() == 1 && grp.group.recomputed.empty();
  });
  if (!device.is_cpu())
    std::erase_if(plan.groups, [&](const codegen::CompiledGroup& grp) {
      const codegen::FusedKernel& k = grp.program->kernel();
      if (codegen::runs_on_device(k)) return false;
      plan.refusals.push_back(str("cannot fuse ", grp.program->name(), " on ", device.str(), ": ",
                                  k.has_reduce()
                                      ? "it reduces (a device runs elementwise kernels only)"
                                      : str("it has more than ", codegen::kMaxKernelArgs, " operands or constants"),
                                  "; its ", grp.group.nodes.size(), " nodes run one by one"));
      return true;
    });
  for (size_t k = 0; k < plan.groups.size(); ++k)
    for (int m : plan.groups[k].group.nodes) group_of[size_t(m)] = int(k);
}

GraphKernels::GraphKernels(const graph::Graph& g, int forward_end, Device device) : group_of(g.nodes().size(), -1) {
  const std::vector<int> roots = grad_roots(g);
  plan = codegen::compile_plan(g, roots, 0, forward_end);
  // The backward on its own: no group spans both, so a forward-only pass runs whole groups.
  codegen::CompiledPlan backward = codegen::compile_plan(g, roots, forward_end, int(g.nodes().size()));
  for (auto& grp : backward.groups) plan.groups.push_back(std::move(grp));
  for (auto& r : backward.refusals) plan.refusals.push_back(std::move(r));
  index(device);
}

Schedule::Schedule(const graph::Graph& g, const GraphKernels* fusion, std::vector<bool> run_nodes,
                   const std::vector<int>& keep)
    : run(std::move(run_nodes)), last(graph::last_uses(g, run)) {
  if (fusion)
    for (const codegen::CompiledGroup& fg : fusion->plan.groups) {
      const std::vector<int>& members = fg.group.nodes;
      fused.push_back(std::all_of(members.begin(), members.end(), [&](int m) { return run[size_t(m)]; }));
      if (!fused.back()) continue;
      // A fused group reads its inputs when it runs: at its last member.
      for (int v : fg.group.inputs) last[size_t(v)] = std::max(last[size_t(v)], members.back());
    }
  for (int v : keep)
    if (v >= 0) last[size_t(v)] = INT_MAX;
}

int running_group(const GraphKernels* fusion, const Schedule& s, size_t i) {
  const int group = fusion ? fusion->group_of[i] : -1;
  return group >= 0 && s.fused[size_t(group)] ? group : -1;
}

MemoryStats memory_stats(const graph::Graph& g, const GraphKernels* fusion, const Schedule& s, int64_t batch) {
  MemoryStats m;
  m.batch = batch;
  std::vector<bool> is_grad(g.values().size(), false);
  for (int v : g.param_grads)
    if (v >= 0) is_grad[size_t(v)] = true;
  std::vector<int64_t> freed_after(g.nodes().size(), 0);
  int64_t live = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (!s.run[i] || n.kind == OpKind::Input || n.kind == OpKind::Param || n.kind == OpKind::Buffer) continue;
    const int group = running_group(fusion, s, i);
    const graph::FusionGroup* fg = group >= 0 ? &fusion->plan.groups[size_t(group)].group : nullptr;
    if (fg && int(i) != fg->nodes.back()) continue;  // a group writes its outputs at its last member
    for (int v : fg ? fg->outputs : n.outputs) {
      if (v < 0) continue;
      const int64_t bytes = g.value_bytes(v, batch);
      if (is_grad[size_t(v)]) {
        m.grad_bytes += bytes;
        continue;
      }
      m.total_bytes += bytes;
      live += bytes;
      // A value nothing reads (last -1) stays, like a kept one, until the pass ends.
      const int end = s.last[size_t(v)];
      if (end >= 0 && end != INT_MAX) freed_after[size_t(std::max(end, int(i)))] += bytes;
    }
    m.peak_bytes = std::max(m.peak_bytes, live);
    live -= freed_after[i];
  }
  return m;
}

Executor::Executor(const graph::Graph& g, const GraphKernels* fusion, Device device)
    : g_(g), fusion_(fusion), device_(device), env_(g.values().size()) {}

void Executor::run(size_t begin, size_t end, const Schedule& s, bool training) {
  PoolWarm warm;  // the nodes' parallel regions follow each other: workers wait for the next awake
  for (size_t i = begin; i < end; ++i) {
    if (!s.run[i]) continue;
    const Node& n = g_.nodes()[i];
    const int group = running_group(fusion_, s, i);
    if (group >= 0) {
      const auto& members = fusion_->plan.groups[size_t(group)].group.nodes;
      if (int(i) != members.back()) continue;  // the group runs at its last member
      run_group(group);
      for (int m : members) release_after(i, g_.nodes()[size_t(m)], s.last);
    } else {
      try {
        if (n.kind == OpKind::Conv2dGrad) conv2d_grad(i);
        else forward(i, training);
      } catch (const NotImplementedError& e) {  // a kernel this device lacks: say which node
        throw NotImplementedError(str(kind_name(n.kind), " (node ", i, " of the step): ", e.what()));
      }
      release_after(i, n, s.last);
    }
    if (after_node) after_node(i);
  }
}

// Frees n's inputs whose last use is at or before node i (parameters stay).
void Executor::release_after(size_t i, const Node& n, const std::vector<int>& last) {
  for (int v : n.inputs)
    if (last[size_t(v)] <= int(i) && g_.nodes()[size_t(g_.value(v).producer)].kind != OpKind::Param)
      env_[size_t(v)] = Tensor();
}

void Executor::run_group(int group) {
  const codegen::CompiledGroup& fg = fusion_->plan.groups[size_t(group)];
  std::vector<Tensor> in;
  in.reserve(fg.group.inputs.size());
  for (int v : fg.group.inputs) in.push_back(env_[size_t(v)]);
  std::vector<Tensor> out = fg.program->run(in, fg.consts);
  for (size_t k = 0; k < out.size(); ++k) env_[size_t(fg.group.outputs[k])] = std::move(out[k]);
}

void Executor::forward(size_t i, bool training) {
  const Node& n = g_.nodes()[i];
  std::vector<Tensor> in = node_inputs(n, env_);
  Tensor out;
  if (typed(n.kind)) {
    env_[size_t(n.outputs[0])] = run_typed_node(n, in, g_.value(n.outputs[0]), device_);
    return;
  }
  switch (n.kind) {
    case OpKind::Input:
    case OpKind::Param:
    case OpKind::Buffer: return;  // set by the caller
    case OpKind::OnesLike: out = ops::full(in[0].shape(), 1.0, in[0].dtype(), in[0].device()); break;
    case OpKind::Dropout:
      if (n.outputs.size() > 1) {  // autodiff gave the node a second output: the mask its rule reads
        const bool on = n.attrs.ints.empty() ? training : n.attrs.ints[0] != 0;
        Tensor mask = on ? ops::dropout_mask(in[0], n.attrs.floats[0]) : Tensor();
        out = on ? ops::mul(in[0], mask) : in[0];
        env_[size_t(n.outputs[1])] = std::move(mask);
        break;
      }
      [[fallthrough]];
    default: out = run_forward_node(n, in, training);
  }
  env_[size_t(n.outputs[0])] = out;
}

void Executor::conv2d_grad(size_t i) {  // one kernel for the three gradients
  const Node& n = g_.nodes()[i];
  std::vector<bool> need;
  for (int v : n.outputs) need.push_back(v >= 0);
  const auto& in = n.inputs;
  std::vector<Tensor> grads =
      ops::grad::conv2d_grad(env_[size_t(in[0])], env_[size_t(in[1])], env_[size_t(in[2])], n.attrs.ints, need);
  for (size_t k = 0; k < n.outputs.size(); ++k)
    if (n.outputs[k] >= 0) env_[size_t(n.outputs[k])] = std::move(grads[k]);
}

}  // namespace nexus::engine
