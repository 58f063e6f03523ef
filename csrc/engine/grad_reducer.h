// GradReducer: the hook CompiledModel::train_step runs the gradients through between backward and
// the optimizer update, so a data-parallel step (forward, backward with the reduction overlapping
// it, the rescale and the update) is one native call like a local one. comm::DataParallelReducer
// is the implementation; the interface sits here so the engine never depends on comm/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/optim.h"
#include "tensor/tensor.h"

namespace nexus::engine {

class GradReducer {
 public:
  virtual ~GradReducer() = default;
  // Before forward, with this step's rows. A step with 0 rows runs no forward or backward: its
  // gradients are zeros and its loss 0.
  virtual void begin(int64_t samples) = 0;
  // During backward, on the thread running it: parameter `param`'s gradient is final (nothing
  // later in the pass writes it), so its reduction may start while backward goes on.
  virtual void on_grad_ready(size_t param, const Tensor& grad) = 0;
  // After backward, before the update: reduces `grads` (one contiguous buffer each) in place and
  // returns the loss the step reports, given this rank's mean loss.
  virtual double finish(const std::vector<Tensor>& grads, double loss) = 0;
  // Whether the reducer takes a device model's gradients where they are (it reduces them on the
  // device); false: CompiledModel hands it host copies and copies the results back.
  virtual bool reduces_on_device() const { return false; }
  // Whether the reducer applies this step's optimizer update itself (sharded among the ranks, see
  // comm::SharedStep). Asked before begin(), only when every parameter gets a gradient; when true,
  // finish() may leave `grads` unreduced and update() replaces ops::optim::step.
  virtual bool takes_update(const ops::optim::Config& /*c*/, const ops::optim::State& /*s*/) { return false; }
  virtual void update(const ops::optim::Config& /*c*/, double /*lr*/, const std::vector<Tensor>& /*params*/,
                      ops::optim::State& /*s*/) {}
};

}  // namespace nexus::engine
