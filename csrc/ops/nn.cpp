// Neural-network ops: cross_entropy (one fused kernel with its own rule), and dropout,
// layer_norm, batch_norm composed from the primitives (their gradients come from theirs).
#include <cmath>

#include "ops/cpu/kernels.h"
#include "ops/derivatives.h"
#include "ops/dispatch.h"
#include "ops/internal.h"

namespace nexus::ops {

// On a device: log_softmax and a one-hot mask from the primitives (their gradients carry it),
// until the device has the fused kernel of the host.
static Tensor cross_entropy_composed(const Tensor& logits, const Tensor& labels, ReduceOp reduction) {
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  Tensor classes = to_device(arange(0, double(c), 1, DType::Int64), logits.device());
  Tensor onehot = binary(BinaryOp::Eq, reshape(labels, {n, 1}), reshape(classes, {1, c}));
  Tensor picked = mul(log_softmax(logits, 1), cast(onehot, compute_dtype(logits.dtype())));
  Tensor nll = unary(UnaryOp::Neg, sum(picked, {1}, false));
  Tensor out = reduction == ReduceOp::None ? nll : reduce(reduction, nll, {}, false);
  return astype(out, logits.dtype());
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, ReduceOp reduction) {
  check_reduce_op(reduction, "cross_entropy: reduction", kLossReductions);
  NX_CHECK(logits.ndim() == 2, "cross_entropy: logits must be (N, C), got shape ", shape_str(logits.shape()));
  NX_CHECK_TYPE(labels.dtype() == DType::Int64 || labels.dtype() == DType::Int32,
                "cross_entropy: labels must be integer class indices, got ", dtype_name(labels.dtype()));
  NX_CHECK(labels.ndim() == 1 && labels.shape()[0] == logits.shape()[0], "cross_entropy: labels of shape ",
           shape_str(labels.shape()), " do not match logits of shape ", shape_str(logits.shape()), "; expected (",
           logits.shape()[0], ",)");
  int64_t n = logits.shape()[0], c = logits.shape()[1];
  const Device dev = common_device("cross_entropy", {logits, labels});
  Tensor lab = contiguous(cast(to_device(labels, Device::cpu()), DType::Int64));
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = lab.data<int64_t>()[i];
    NX_CHECK_INDEX(v >= 0 && v < c, "cross_entropy: label ", v, " at position ", i, " is out of range for ", c,
                   " classes; valid: [0, ", c - 1, "]");
  }
  DType cdt = compute_dtype(logits.dtype());
  NX_CHECK_TYPE(is_floating(cdt), "cross_entropy: logits must be floating point, got ", dtype_name(logits.dtype()));
  if (!dev.is_cpu()) return cross_entropy_composed(logits, to_device(lab, dev), reduction);
  Tensor x = contiguous(cast(logits.detach(), cdt));
  Tensor nll = Tensor::empty({n}, cdt), stats = Tensor::empty({2, n}, cdt);  // shift, logsum
  cpu::kernels().xent_forward(x, lab, nll, stats);
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    out = reduction == ReduceOp::None ? nll : reduce(reduction, nll, {}, false);
    out = cast(out, logits.dtype());
  }
  return autograd::record("cross_entropy", out, {logits},
                          grad::cross_entropy(x, lab, stats, reduction, logits.dtype()));
}

Tensor dropout(const Tensor& x, double p, bool training) {
  NX_CHECK(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got ", p);
  if (!training || p == 0) return x;
  return mul(x, dropout_mask(x, p));
}

Tensor dropout_mask(const Tensor& x, double p) {
  NX_CHECK(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got ", p);
  NX_CHECK_TYPE(is_floating(x.dtype()), "dropout: expected a floating-point tensor, got ", dtype_name(x.dtype()));
  if (p == 0) return full(x.shape(), 1, x.dtype(), x.device());        // nothing dropped, no random numbers drawn
  if (p == 1) return Tensor::zeros(x.shape(), x.dtype(), x.device());  // everything dropped (x * 0, gradient 0)
  // drawn on the host, as for a host tensor: the same seed drops the same elements on any device
  Tensor keep =
      binary(BinaryOp::Ge, to_device(rand(x.shape(), DType::Float32), x.device()), full({}, p, DType::Float32));
  return mul_scalar(cast(keep, x.dtype()), 1.0 / (1.0 - p));
}

static Tensor normalize(const Tensor& x, const Tensor& mu, const Tensor& v, double eps) {
  return div(sub(x, mu), unary(UnaryOp::Sqrt, add_scalar(v, eps)));
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  int64_t k = int64_t(normalized_shape.size());
  bool ok = k >= 1 && k <= x.ndim();
  for (int64_t i = 0; ok && i < k; ++i) ok = x.shape()[x.ndim() - k + i] == normalized_shape[i];
  NX_CHECK(ok, "layer_norm: normalized_shape ", shape_str(normalized_shape),
           " must match the trailing dimensions of the input of shape ", shape_str(x.shape()));
  for (const Tensor* p : {&weight, &bias})
    NX_CHECK(!p->defined() || p->shape() == normalized_shape, "layer_norm: weight/bias of shape ",
             shape_str(p->shape()), " must have shape ", shape_str(normalized_shape));
  Axes axes;
  for (int64_t i = x.ndim() - k; i < x.ndim(); ++i) axes.push_back(i);
  Tensor y = normalize(x, mean(x, axes, true), var(x, axes, true, 0), eps);
  if (weight.defined()) y = mul(y, weight);
  if (bias.defined()) y = add(y, bias);
  return y;
}

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  NX_CHECK(x.ndim() >= 2, "batch_norm: input must be (N, C, ...), got shape ", shape_str(x.shape()));
  int64_t c = x.shape()[1];
  for (const Tensor* p : {&running_mean, &running_var, &weight, &bias})
    NX_CHECK(!p->defined() || p->shape() == Shape{c}, "batch_norm: running stats, weight and bias must have shape (", c,
             ",) for an input of shape ", shape_str(x.shape()), ", got ", shape_str(p->shape()));
  NX_CHECK(training || (running_mean.defined() && running_var.defined()),
           "batch_norm: running_mean and running_var are required when training=False");
  Axes axes{0};
  for (int64_t d = 2; d < x.ndim(); ++d) axes.push_back(d);
  Shape bshape(size_t(x.ndim()), 1);
  bshape[1] = c;
  Tensor mu, v;
  if (training) {
    int64_t n = x.numel() / std::max<int64_t>(c, 1);
    NX_CHECK(n > 1, "batch_norm: expected more than 1 value per channel when training, got input shape ",
             shape_str(x.shape()));
    mu = mean(x, axes, true);
    v = var(x, axes, true, 0);
    autograd::NoGradGuard no_grad;
    if (running_mean.defined())
      copy_(running_mean, add(mul_scalar(running_mean, 1 - momentum), mul_scalar(reshape(mu.detach(), {c}), momentum)));
    if (running_var.defined())
      copy_(running_var, add(mul_scalar(running_var, 1 - momentum),
                             mul_scalar(reshape(v.detach(), {c}), momentum * double(n) / double(n - 1))));
  } else {
    mu = reshape(running_mean, bshape);
    v = reshape(running_var, bshape);
  }
  Tensor y = normalize(x, mu, v, eps);
  if (weight.defined()) y = mul(y, reshape(weight, bshape));
  if (bias.defined()) y = add(y, reshape(bias, bshape));
  return y;
}

}  // namespace nexus::ops
