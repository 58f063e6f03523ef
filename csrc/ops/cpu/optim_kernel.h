// What the CPU optimizer kernels (kernels.h: sgd, adam, sum_squares, scale_grads) take. The front
// end (ops/optim.cpp) checks the tensors and turns hyperparameters into coefficients; the loops
// only apply them. All parameters form one
// virtual flat buffer that is split over the thread pool, so many small parameters and a few
// large ones both keep every thread busy, and every element is updated independently (the
// result does not depend on the split).
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/dtype.h"

namespace nexus::ops::cpu {

// One parameter's contiguous buffers, all of `dtype` (float32 or float64).
struct OptimSegment {
  DType dtype = DType::Float32;
  int64_t numel = 0;
  void* param = nullptr;
  const void* grad = nullptr;
  void* m = nullptr;  // SGD momentum buffer / Adam first moment; null when unused
  void* v = nullptr;  // Adam second moment; null when unused
  // Per-parameter coefficients (they differ when parameters have taken different step counts).
  double buf_keep = 0, buf_add = 0;      // SGD: buf = buf_keep*buf + buf_add*d (first step: 0, 1)
  double step_size = 0, bias2_sqrt = 0;  // Adam: lr / (1 - beta1^t), sqrt(1 - beta2^t)
};

struct SgdCoeffs {
  double lr, grad_scale, weight_decay, momentum;
  bool use_momentum, nesterov;
};

struct AdamCoeffs {
  double grad_scale;
  double l2;     // Adam: weight_decay added to the gradient; AdamW: 0
  double decay;  // AdamW: 1 - lr*weight_decay applied to the parameter; Adam: 1
  double one_minus_beta1, beta2, one_minus_beta2, eps;
};

}  // namespace nexus::ops::cpu
