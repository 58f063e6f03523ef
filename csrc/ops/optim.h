// Optimizer updates: one fused, in-place native call over all parameters (SGD, Adam, AdamW), with
// optional global-norm gradient clipping. The semantics are PyTorch's (torch.optim.SGD / Adam /
// AdamW, torch.nn.utils.clip_grad_norm_); the learning rate is an argument of every step, so a
// schedule stays policy in the caller (python/nexus/optim.py or the compiled model).
//
//   optim::Config c;  c.kind = optim::Config::Kind::Adam;
//   optim::State s;
//   for (...) { /* backward fills grads */  optim::step(c, lr_at(s.step), params, grads, s); }
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace nexus::ops::optim {

struct Config {
  enum class Kind { SGD, Adam, AdamW };
  Kind kind = Kind::SGD;
  double momentum = 0, dampening = 0;             // SGD
  bool nesterov = false;                          // SGD; needs momentum > 0 and dampening == 0
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam, AdamW
  double weight_decay = 0;                        // SGD, Adam: L2 added to the gradient; AdamW: decoupled p -= lr*wd*p
  double clip_norm = 0;                           // > 0: scale all gradients by min(1, clip_norm / (norm + 1e-6)) first
};

// What an optimizer carries between steps. Buffers are created lazily, per parameter, the first
// time that parameter has a gradient; parameters whose gradient is undefined are skipped and keep
// their buffers and step count unchanged (PyTorch's per-parameter state).
struct State {
  int64_t step = 0;                  // step() calls so far (what a schedule is evaluated at)
  std::vector<int64_t> param_steps;  // updates applied to each parameter (Adam's bias correction)
  std::vector<Tensor> m;             // SGD: momentum buffer; Adam/AdamW: first moment (exp_avg)
  std::vector<Tensor> v;             // Adam/AdamW: second moment (exp_avg_sq)
};

// Raises ValueError naming the bad hyperparameter and its valid range.
void validate(const Config& c, double lr);

// Sum of squares over every defined gradient, accumulated in double in a fixed order: the same
// bits whatever the thread count. Undefined gradients are skipped.
double sum_squares(const std::vector<Tensor>& grads);

// sqrt(sum_squares(grads)).
double global_grad_norm(const std::vector<Tensor>& grads);

// The factor clipping applies to gradients of this norm: min(1, max_norm / (norm + 1e-6)), as
// torch.nn.utils.clip_grad_norm_ (a NaN norm gives NaN, an infinite one 0).
double clip_scale(double norm, double max_norm);

// Multiplies every defined gradient by `factor` in place. Gradients must be contiguous.
void scale_(const std::vector<Tensor>& grads, double factor);

// torch.nn.utils.clip_grad_norm_: scales the gradients in place by min(1, max_norm/(norm + 1e-6))
// and returns the norm before clipping.
double clip_grad_norm(const std::vector<Tensor>& grads, double max_norm);

// Moves a parameter out of shared memory (Storage::shared: a data-parallel segment) to a copy
// of its own, every handle of it at once (Tensor::rebind), its values unchanged. Host tensors.
void move_to_own_memory(const Tensor& p);

// One update of every parameter with a defined gradient, in place on the parameters' storage.
// params: contiguous float32/float64 tensors; grads[i]: undefined (skipped) or params[i]'s shape
// and dtype. With c.clip_norm > 0 the gradients are clipped first (the scale is applied inside
// the update; the gradient tensors themselves are not modified). Increments s.step.
void step(const Config& c, double lr, const std::vector<Tensor>& params, const std::vector<Tensor>& grads, State& s);

}  // namespace nexus::ops::optim
