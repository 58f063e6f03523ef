#include "engine/traced.h"

#include <chrono>

#include "graph/passes/passes.h"
#include "tensor/tape.h"

namespace nexus::engine {

TracedProgram::TracedProgram(graph::Graph g, std::vector<int> roots, bool fuse, bool epilogues)
    : g_(std::move(g)), roots_(std::move(roots)) {
  g_.verify();
  for (int r : roots_)
    NX_CHECK(r >= 0 && size_t(r) < g_.values().size(), "traced program: root value ", r, " is not in the graph");
  if (epilogues && graph::fold_epilogues(g_, roots_) > 0) g_.verify();
  if (fuse) fusion_ = std::make_unique<GraphKernels>(g_, roots_);
  schedule_ = Schedule(g_, fusion_.get(), graph::live_nodes(g_, roots_, int(g_.nodes().size())), roots_);
}

std::vector<Tensor> TracedProgram::run(const std::vector<Tensor>& inputs) const {
  NX_CHECK(inputs.size() == g_.inputs.size(), "traced program: expected ", g_.inputs.size(), " inputs, got ",
           inputs.size());
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock) {
    Executor own(g_, fusion_.get());
    return run_on(own, inputs);
  }
  if (!executor_) executor_ = std::make_unique<Executor>(g_, fusion_.get());
  return run_on(*executor_, inputs);
}

std::vector<double> TracedProgram::profile(const std::vector<Tensor>& inputs) const {
  NX_CHECK(inputs.size() == g_.inputs.size(), "traced program: expected ", g_.inputs.size(), " inputs, got ",
           inputs.size());
  Executor ex(g_, fusion_.get());
  std::vector<double> seconds(g_.nodes().size(), 0.0);
  auto last = std::chrono::steady_clock::now();
  ex.after_node = [&](size_t i) {
    const auto now = std::chrono::steady_clock::now();
    seconds[i] = std::chrono::duration<double>(now - last).count();
    last = now;
  };
  run_on(ex, inputs);
  return seconds;
}

std::vector<Tensor> TracedProgram::run_on(Executor& ex, const std::vector<Tensor>& inputs) const {
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
  ex.run(0, g_.nodes().size(), schedule_, /*training=*/false);
  std::vector<Tensor> out;
  out.reserve(roots_.size());
  for (int r : roots_) out.push_back(ex.get(r));
  ex.clear();  // between calls the executor holds no memory
  return out;
}

}  // namespace nexus::engine
