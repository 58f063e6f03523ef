#include "engine/traced.h"

#include <algorithm>
#include <chrono>

#include "graph/passes/passes.h"
#include "tensor/tape.h"

namespace nexus::engine {

TracedProgram::TracedProgram(graph::Graph g, std::vector<int> roots, bool fuse, bool epilogues)
    : g_(std::move(g)), roots_(std::move(roots)), fuse_(fuse) {
  g_.verify();
  for (int r : roots_)
    NX_CHECK(r >= 0 && size_t(r) < g_.values().size(), "traced program: root value ", r, " is not in the graph");
  if (epilogues && graph::fold_epilogues(g_, roots_) > 0) g_.verify();
  host_ = make_plan(Device::cpu());
}

std::unique_ptr<TracedProgram::DevicePlan> TracedProgram::make_plan(Device device) const {
  auto p = std::make_unique<DevicePlan>();
  p->device = device;
  if (fuse_) p->fusion = std::make_unique<GraphKernels>(g_, roots_, device);
  p->schedule = Schedule(g_, p->fusion.get(), graph::live_nodes(g_, roots_, int(g_.nodes().size())), roots_);
  return p;
}

TracedProgram::DevicePlan& TracedProgram::plan_for(const std::vector<Tensor>& inputs) const {
  NX_CHECK(inputs.size() == g_.inputs.size(), "traced program: expected ", g_.inputs.size(), " inputs, got ",
           inputs.size());
  auto on =
      std::find_if(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.defined() && !t.device().is_cpu(); });
  if (on == inputs.end()) return *host_;
  std::lock_guard<std::mutex> lock(devices_mu_);
  for (const auto& p : devices_)
    if (p->device == on->device()) return *p;
  devices_.push_back(make_plan(on->device()));
  return *devices_.back();
}

std::vector<Tensor> TracedProgram::run(const std::vector<Tensor>& inputs) const {
  DevicePlan& p = plan_for(inputs);
  std::unique_lock<std::mutex> lock(p.mu, std::try_to_lock);
  if (!lock) {
    Executor own(g_, p.fusion.get(), p.device);
    return run_on(own, p.schedule, inputs);
  }
  if (!p.executor) p.executor = std::make_unique<Executor>(g_, p.fusion.get(), p.device);
  return run_on(*p.executor, p.schedule, inputs);
}

std::vector<double> TracedProgram::profile(const std::vector<Tensor>& inputs) const {
  const DevicePlan& p = plan_for(inputs);
  Executor ex(g_, p.fusion.get(), p.device);
  std::vector<double> seconds(g_.nodes().size(), 0.0);
  auto last = std::chrono::steady_clock::now();
  ex.after_node = [&](size_t i) {
    const auto now = std::chrono::steady_clock::now();
    seconds[i] = std::chrono::duration<double>(now - last).count();
    last = now;
  };
  run_on(ex, p.schedule, inputs);
  return seconds;
}

std::vector<Tensor> TracedProgram::run_on(Executor& ex, const Schedule& s, const std::vector<Tensor>& inputs) const {
  autograd::NoGradGuard no_grad;
  ex.clear();  // a call that failed part way leaves values behind
  for (size_t i = 0; i < inputs.size(); ++i) {
    const graph::Value& v = g_.value(g_.inputs[i]);
    // The rank, not the shape: a trace of shape-free ops serves every shape of its class.
    NX_CHECK(inputs[i].dtype() == v.dtype && inputs[i].ndim() == int64_t(v.shape.size()), "traced program: input ", i,
             " ('", v.name, "') must be a ", dtype_name(v.dtype), " tensor of ", v.shape.size(),
             " dimension(s) (traced as ", shape_str(v.shape), "), got ", dtype_name(inputs[i].dtype()), " ",
             shape_str(inputs[i].shape()));
    ex.set(g_.inputs[i], inputs[i]);
  }
  ex.run(0, g_.nodes().size(), s, /*training=*/false);
  std::vector<Tensor> out;
  out.reserve(roots_.size());
  for (int r : roots_) out.push_back(ex.get(r));
  ex.clear();  // between calls the executor holds no memory
  return out;
}

}  // namespace nexus::engine
