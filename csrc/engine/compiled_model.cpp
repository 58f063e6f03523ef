#include "engine/compiled_model.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <deque>

#include "device/backend.h"
#include "engine/executor.h"
#include "graph/passes/passes.h"
#include "ops/ops.h"
#include "tensor/tape.h"

namespace nexus::engine {

using graph::OpKind;

CompiledModel::CompiledModel(graph::Graph g, std::vector<Tensor> params, std::vector<Tensor> buffers, bool fuse)
    : g_(std::move(g)), params_(std::move(params)), buffers_(std::move(buffers)), fuse_(fuse) {
  NX_CHECK(g_.inputs.size() == 2, "a compiled model needs two inputs (features, labels), got ", g_.inputs.size());
  NX_CHECK(g_.output >= 0 && g_.loss >= 0, "a compiled model needs an output and a loss");
  NX_CHECK(params_.size() == g_.params.size(), "expected ", g_.params.size(), " parameter tensors, got ",
           params_.size());
  NX_CHECK(buffers_.size() == g_.buffers.size(), "expected ", g_.buffers.size(), " buffers, got ", buffers_.size());
  for (const Tensor& t : params_)
    NX_CHECK(t.device() == params_[0].device(), "a compiled model's parameters must be on one device, got ",
             params_[0].device().str(), " and ", t.device().str());
  if (!params_.empty()) device_ = params_[0].device();
  for (Tensor& t : buffers_) t = ops::to_device(t, device_);
  // The compile driver: a list of named passes.
  graph::autodiff(g_);
  grads_.resize(params_.size());
  plan();
}

void CompiledModel::plan() {
  std::vector<int> roots = g_.param_grads;
  roots.push_back(g_.loss);
  const int all = int(g_.nodes().size());
  // After autodiff, so the values backward reads count as the groups' outputs. On a device, the
  // elementwise groups run as generated CUDA kernels and the rest node by node (GraphKernels).
  fusion_.reset();
  if (fuse_) fusion_ = std::make_unique<GraphKernels>(g_, g_.forward_end, device_);
  train_ = schedule(roots, all);
  predict_ = schedule({g_.output}, g_.forward_end);
  loss_ = schedule({g_.loss}, g_.forward_end);
  // A gradient is final once its producer has run: values are written once. A producer inside
  // a fused group runs when the group's last member does.
  grads_final_at_.assign(size_t(all), {});
  for (size_t i = 0; i < params_.size(); ++i) {
    const int v = g_.param_grads[i];
    if (v < 0) continue;
    int at = g_.value(v).producer;
    const int group = running_group(fusion_.get(), train_, size_t(at));
    if (group >= 0) at = fusion_->plan.groups[size_t(group)].group.nodes.back();
    grads_final_at_[size_t(at)].push_back(i);
  }
}

void CompiledModel::to(Device device) {
  if (device == device_) return;
  for (Tensor& t : params_) t = ops::to_device(t.detach(), device);
  for (Tensor& t : buffers_) t = ops::to_device(t.detach(), device);
  for (Tensor& t : grads_) t = t.defined() ? ops::to_device(t, device) : t;
  device_ = device;
  plan();
}

Tensor CompiledModel::on_device(const Tensor& t) const { return ops::to_device(t, device_); }

// The loss a pass computed, as a host double.
static double host_loss(const Tensor& loss) {
  return *ops::to_device(ops::astype(loss, DType::Float64), Device::cpu()).data<double>();
}

// The pass over the nodes [0, end) that `roots` need; it keeps every result a caller may read.
Schedule CompiledModel::schedule(const std::vector<int>& roots, int end) const {
  std::vector<int> keep = g_.param_grads;
  keep.insert(keep.end(), {g_.output, g_.loss});
  return Schedule(g_, fusion_.get(), graph::live_nodes(g_, roots, end), keep);
}

CompiledModel::Traffic CompiledModel::step_traffic(int64_t batch) const {
  Traffic t;
  for (size_t i = 0; i < g_.nodes().size(); ++i) {
    const graph::Node& n = g_.nodes()[i];
    if (!train_.run[i] || n.kind == OpKind::Input || n.kind == OpKind::Param || n.kind == OpKind::Buffer ||
        n.kind == OpKind::Const)
      continue;
    const int64_t b = g_.node_bytes(n, batch);
    t.unfused += b;
    const int group = running_group(fusion_.get(), train_, i);
    if (group < 0) {
      t.fused += b;
    } else if (int(i) == fusion_->plan.groups[size_t(group)].group.nodes.back()) {
      t.fused += graph::fused_bytes(g_, fusion_->plan.groups[size_t(group)].group, batch);
    }
  }
  return t;
}

void CompiledModel::bind_state(Executor& ex) const {
  for (size_t i = 0; i < params_.size(); ++i) ex.set(g_.params[i], params_[i]);
  for (size_t i = 0; i < buffers_.size(); ++i) ex.set(g_.buffers[i], buffers_[i]);
}

double CompiledModel::forward_backward(const Tensor& x, const Tensor& y, const GradReady& ready,
                                       const std::function<void(size_t)>& after_node) {
  Executor ex(g_, fusion_.get(), device_);
  bind_state(ex);
  if (ready || after_node)
    ex.after_node = [&](size_t i) {
      if (ready)
        for (size_t p : grads_final_at_[i]) ready(p, ex.get(g_.param_grads[p]));
      if (after_node) after_node(i);
    };
  ex.set(g_.inputs[0], on_device(x));
  ex.set(g_.inputs[1], on_device(y));
  autograd::NoGradGuard no_grad;  // the graph holds the backward: nothing records a tape
  ex.run(0, g_.nodes().size(), train_, /*training=*/true);
  for (size_t i = 0; i < params_.size(); ++i) {
    grads_[i] = g_.param_grads[i] >= 0 ? ex.get(g_.param_grads[i]) : Tensor();
    // Every gradient its own buffer (an elementwise rule may hand one value to two params), so
    // in-place use (an all-reduce) of one never changes another.
    for (size_t j = 0; j < i && grads_[i].defined(); ++j)
      if (grads_[j].defined() && grads_[j].storage() == grads_[i].storage())
        grads_[i] = ops::contiguous(grads_[i], /*force_copy=*/true);
  }
  return host_loss(ex.get(g_.loss));
}

std::vector<double> CompiledModel::profile(const Tensor& x, const Tensor& y) {
  std::vector<double> seconds(g_.nodes().size(), 0.0);
  auto last = std::chrono::steady_clock::now();
  forward_backward(x, y, {}, [&](size_t i) {
    const auto now = std::chrono::steady_clock::now();
    seconds[i] = std::chrono::duration<double>(now - last).count();
    last = now;
  });
  return seconds;
}

double CompiledModel::train_step(const Tensor& x, const Tensor& y, const ops::optim::Config& opt, double lr,
                                 ops::optim::State& state, GradReducer* reducer) {
  bool every_grad = device_.is_cpu();
  for (int g : g_.param_grads) every_grad = every_grad && g >= 0;
  const bool sharded = reducer && every_grad && reducer->takes_update(opt, state);
  const double loss = reducer ? reduced_forward_backward(x, y, *reducer) : forward_backward(x, y);
  if (sharded) reducer->update(opt, lr, params_, state);
  else ops::optim::step(opt, lr, params_, grads_, state);
  return loss;
}

double CompiledModel::reduced_forward_backward(const Tensor& x, const Tensor& y, GradReducer& reducer) {
  NX_CHECK(x.defined() && x.ndim() > 0, "train_step: the features need a batch dimension");
  const int64_t rows = x.dim(0);
  reducer.begin(rows);
  // The reduction runs on host buffers unless the reducer reduces on the device: each gradient is
  // then queued for a copy into pinned host memory as soon as it is final, the copy engine moving
  // it while backward goes on; the reducer gets each one when its bytes have arrived (checked at
  // every later gradient, then waited for in order after backward), and the reduced ones are
  // copied back.
  const bool staged = !device_.is_cpu() && !reducer.reduces_on_device();
  std::vector<Tensor> host(params_.size());
  std::deque<std::pair<size_t, std::unique_ptr<device::PendingCopy>>> copying;
  auto hand_over = [&](bool wait) {
    while (!copying.empty() && (wait || copying.front().second->done())) {
      copying.front().second->wait();
      reducer.on_grad_ready(copying.front().first, host[copying.front().first]);
      copying.pop_front();
    }
  };
  double loss = 0;
  if (rows > 0) {
    loss = forward_backward(x, y, [&](size_t p, const Tensor& g) {
      if (!g.defined() || !g.is_contiguous()) return;
      if (!staged) {
        host[p] = g;
        reducer.on_grad_ready(p, g);
        return;
      }
      device::Backend& be = device::backend(device_);
      host[p] = be.empty_pinned(g.shape(), g.dtype());
      copying.emplace_back(p, be.copy_to_host_async(host[p], g));
      hand_over(false);
    });
    hand_over(true);
  } else {
    for (size_t i = 0; i < params_.size(); ++i)
      grads_[i] = Tensor::zeros(params_[i].shape(), params_[i].dtype(), device_);
  }
  if (!staged) return reducer.finish(grads_, loss);
  for (size_t i = 0; i < params_.size(); ++i)
    if (!host[i].defined() && grads_[i].defined()) host[i] = ops::to_device(grads_[i], Device::cpu());
  const double reported = reducer.finish(host, loss);
  for (size_t i = 0; i < params_.size(); ++i)  // from pinned memory: queued, not waited for
    if (host[i].defined()) grads_[i] = ops::to_device(host[i], device_, /*non_blocking=*/true);
  return reported;
}

Tensor CompiledModel::predict(const Tensor& x) {
  Executor ex(g_, fusion_.get(), device_);
  bind_state(ex);
  ex.set(g_.inputs[0], on_device(x));
  autograd::NoGradGuard no_grad;
  ex.run(0, size_t(g_.forward_end), predict_, /*training=*/false);
  return ex.get(g_.output);
}

double CompiledModel::evaluate_loss(const Tensor& x, const Tensor& y) {
  Executor ex(g_, fusion_.get(), device_);
  bind_state(ex);
  ex.set(g_.inputs[0], on_device(x));
  ex.set(g_.inputs[1], on_device(y));
  autograd::NoGradGuard no_grad;
  ex.run(0, size_t(g_.forward_end), loss_, /*training=*/false);
  return host_loss(ex.get(g_.loss));
}

}  // namespace nexus::engine
