// Neural-network ops: cross_entropy (one fused kernel with its own rule), and dropout,
// layer_norm, batch_norm composed from the primitives (their gradients come from theirs);
// batch_norm_stats, the statistics a compiled graph's batch norm reads (one pass on the host).
#include <cmath>

#include "ops/cpu/kernels.h"
#include "ops/derivatives.h"
#include "ops/dispatch.h"
#include "ops/internal.h"
#include "tensor/tape.h"

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
  // On the CPU without a gradient to record (inference): one kernel pass per row, not the eight
  // ops below (each a pass and a parallel region: a transformer's 128x128 layer norm took 70 us
  // that way against PyTorch's 25 on an AVX2 machine).
  int64_t n = 1;
  for (int64_t d : normalized_shape) n *= d;
  auto like_x = [&](const Tensor& t) { return !t.defined() || (t.dtype() == x.dtype() && t.device().is_cpu()); };
  if (x.device().is_cpu() && x.numel() > 0 && (x.dtype() == DType::Float32 || x.dtype() == DType::Float64) &&
      like_x(weight) && like_x(bias) && !autograd::would_record({x, weight, bias})) {
    Tensor y = Tensor::empty(x.shape(), x.dtype());
    cpu::kernels().layer_norm_rows(y, contiguous(x), n, weight.defined() ? contiguous(weight) : Tensor(),
                                   bias.defined() ? contiguous(bias) : Tensor(), eps);
    return y;
  }
  Axes axes;
  for (int64_t i = x.ndim() - k; i < x.ndim(); ++i) axes.push_back(i);
  Tensor y = normalize(x, mean(x, axes, true), var(x, axes, true, 0), eps);
  if (weight.defined()) y = mul(y, weight);
  if (bias.defined()) y = add(y, bias);
  return y;
}

// batch_norm's and batch_norm_stats's argument checks; returns the channel count.
static int64_t check_batch_norm(const char* op, const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                                const Tensor& weight, const Tensor& bias, bool training) {
  NX_CHECK(x.ndim() >= 2, op, ": input must be (N, C, ...), got shape ", shape_str(x.shape()));
  const int64_t c = x.shape()[1];
  for (const Tensor* p : {&running_mean, &running_var, &weight, &bias})
    NX_CHECK(!p->defined() || p->shape() == Shape{c}, op, ": running stats, weight and bias must have shape (", c,
             ",) for an input of shape ", shape_str(x.shape()), ", got ", shape_str(p->shape()));
  NX_CHECK(training || (running_mean.defined() && running_var.defined()), op,
           ": running_mean and running_var are required when training=False");
  NX_CHECK(!training || x.numel() / std::max<int64_t>(c, 1) > 1, op,
           ": expected more than 1 value per channel when training, got input shape ", shape_str(x.shape()));
  return c;
}

// The running statistics (either may be undefined) moved by `momentum` towards a batch's mean
// and biased variance (C values each) over n values per channel; the variance unbiased, as PyTorch.
// On the host, per channel in double (a step's dozens of batch norms would otherwise each run
// several small ops); on a device, as tensor ops.
static void update_running(const Tensor& running_mean, const Tensor& running_var, const Tensor& mean, const Tensor& var,
                           double momentum, int64_t n) {
  autograd::NoGradGuard no_grad;
  const int64_t c = mean.numel();
  auto move = [&](const Tensor& running, const Tensor& batch, double scale) {
    if (!running.defined()) return;
    if (!running.device().is_cpu() || !batch.device().is_cpu()) {
      copy_(running,
            add(mul_scalar(running, 1 - momentum), mul_scalar(reshape(batch.detach(), {c}), momentum * scale)));
      return;
    }
    Tensor r = contiguous(astype(running, DType::Float64)), b = contiguous(astype(batch.detach(), DType::Float64));
    double* p = r.data<double>();
    const double* q = b.data<double>();
    for (int64_t i = 0; i < c; ++i) p[i] = (1 - momentum) * p[i] + momentum * scale * q[i];
    copy_(running, r);
  };
  move(running_mean, mean, 1.0);
  move(running_var, var, double(n) / double(n - 1));
}

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  const int64_t c = check_batch_norm("batch_norm", x, running_mean, running_var, weight, bias, training);
  Axes axes{0};
  for (int64_t d = 2; d < x.ndim(); ++d) axes.push_back(d);
  Shape bshape(size_t(x.ndim()), 1);
  bshape[1] = c;
  Tensor mu, v;
  if (training) {
    mu = mean(x, axes, true);
    v = var(x, axes, true, 0);
    update_running(running_mean, running_var, mu, v, momentum, x.numel() / c);
  } else {
    mu = reshape(running_mean, bshape);
    v = reshape(running_var, bshape);
  }
  Tensor y = normalize(x, mu, v, eps);
  if (weight.defined()) y = mul(y, reshape(weight, bshape));
  if (bias.defined()) y = add(y, reshape(bias, bshape));
  return y;
}

// batch_norm_stats on the host: x's statistics by one kernel pass, the rest per channel here.
template <class T> static void host_batch_norm_stats(const Tensor& x, const Tensor& running_mean,
                                                     const Tensor& running_var, double momentum, double eps,
                                                     const Tensor& out) {
  const int64_t c = x.dim(1);
  Tensor stats = Tensor::empty({2, c}, DType::Float64);
  cpu::kernels().channel_stats(stats, contiguous(x));
  update_running(running_mean, running_var, select(stats, 0, 0), select(stats, 0, 1), momentum, x.numel() / c);
  const double* s = stats.data<double>();
  T* o = out.data<T>();
  for (int64_t i = 0; i < c; ++i) {
    o[i] = T(s[i]);
    o[c + i] = T(1.0 / std::sqrt(s[c + i] + eps));
  }
}

Tensor batch_norm_stats(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, bool training,
                        double momentum, double eps) {
  const int64_t c = check_batch_norm("batch_norm", x, running_mean, running_var, {}, {}, training);
  NX_CHECK_TYPE(is_floating(x.dtype()), "batch_norm: expected a floating-point input, got ", dtype_name(x.dtype()));
  autograd::NoGradGuard no_grad;
  Shape shape(size_t(x.ndim()) + 1, 1);  // (1, 2, C, 1, ...): dim 0 is never read as a batch
  shape[1] = 2;
  shape[2] = c;
  const bool host = x.device().is_cpu() && (!running_mean.defined() || running_mean.device().is_cpu()) &&
                    (!running_var.defined() || running_var.device().is_cpu());
  if (training && host && (x.dtype() == DType::Float32 || x.dtype() == DType::Float64)) {
    Tensor out = Tensor::empty(shape, x.dtype());
    if (x.dtype() == DType::Float64) host_batch_norm_stats<double>(x, running_mean, running_var, momentum, eps, out);
    else host_batch_norm_stats<float>(x, running_mean, running_var, momentum, eps, out);
    return out;
  }
  Tensor mu = running_mean, v = running_var;  // (C) each
  if (training) {                             // on a device (or in half precision): composed from reductions
    Axes axes{0};
    for (int64_t d = 2; d < x.ndim(); ++d) axes.push_back(d);
    mu = mean(x, axes, false);
    v = var(x, axes, false, 0);
    update_running(running_mean, running_var, mu, v, momentum, x.numel() / c);
  }
  Tensor root = unary(UnaryOp::Sqrt, add_scalar(v, eps));
  Tensor rstd = div(scalar_like(1, root), root);
  return reshape(astype(stack({mu, rstd}, 0), x.dtype()), shape);
}

}  // namespace nexus::ops
