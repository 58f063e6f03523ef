// Reduction front ends (numpy names and semantics) and the softmax family built from them.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/cpu/kernels.h"
#include "ops/derivatives.h"
#include "ops/dispatch.h"
#include "ops/internal.h"
#include "tensor/tape.h"

namespace nexus::ops {

Axes normalize_axes(const Axes& axes, int64_t ndim, const char* op) {
  Axes out;
  if (axes.empty()) {
    for (int64_t i = 0; i < ndim; ++i) out.push_back(i);
    return out;
  }
  for (int64_t a : axes) out.push_back(wrap_axis(a, ndim, op));
  std::sort(out.begin(), out.end());
  NX_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": repeated axis in the axes");
  if (ndim == 0) out.clear();  // axis 0 / -1 of a 0-d tensor reduces nothing
  return out;
}

Shape reduced_shape(const Shape& shape, const Axes& axes, bool keepdims) {
  Shape out;
  for (int64_t d = 0; d < int64_t(shape.size()); ++d) {
    bool r = std::binary_search(axes.begin(), axes.end(), d);
    if (!r) out.push_back(shape[d]);
    else if (keepdims) out.push_back(1);
  }
  return out;
}

// Does x repeat one element along every axis in `axes` (stride 0, none of them empty)?
static bool broadcast_along(const Tensor& x, const Axes& axes) {
  if (axes.empty()) return false;
  for (int64_t a : axes)
    if (x.strides()[a] != 0 || x.shape()[a] == 0) return false;
  return true;
}

Tensor reduce(ReduceOp op, const Tensor& x, const Axes& axes_in, bool keepdims) {
  check_reduce_op(op, "reduce: op", kReductions);
  if (op == ReduceOp::Mean) return mean(x, axes_in, keepdims);
  const char* name = reduce_op_name(op).data();  // the names are string literals
  Axes axes = normalize_axes(axes_in, x.ndim(), name);
  if (is_extremum(op))
    for (int64_t a : axes)
      NX_CHECK(x.shape()[a] > 0, name, ": zero-size axis ", a, " of shape ", shape_str(x.shape()),
               " has no identity; reduce over non-empty axes");
  if (op == ReduceOp::Sum && is_floating(x.dtype()) && broadcast_along(x, axes)) {
    // Each reduced value is one element repeated (a view of a broadcast, such as the ones a
    // gradient's count sums): that element times the count, without a pass over the repeats.
    Tensor once = x.detach();
    double n = 1;
    for (auto a = axes.rbegin(); a != axes.rend(); ++a) {
      n *= double(x.shape()[*a]);
      once = keepdims ? slice(once, *a, 0, 1, 1) : select(once, *a, 0);
    }
    Tensor out = mul_scalar(once, n);
    return autograd::record(name, out, {x}, grad::sum(x.shape(), axes, keepdims));
  }
  DType cdt = compute_dtype(x.dtype());
  DType out_dt = x.dtype();
  if (op == ReduceOp::Sum && !is_floating(x.dtype())) out_dt = cdt = DType::Int64;
  Tensor xc = cast(x, compute_dtype(x.dtype()));
  Tensor out = Tensor::empty(reduced_shape(x.shape(), axes, keepdims), cdt, x.device());
  if (axes.empty()) kernel::cast(out, xc);
  else kernel::reduce(op, out, xc, axes);
  out = cast(out, out_dt);
  if (op == ReduceOp::Sum) return autograd::record(name, out, {x}, grad::sum(x.shape(), axes, keepdims));
  return autograd::record(name, out, {x}, grad::extremum(x, out.detach(), axes, keepdims));
}

Tensor sum(const Tensor& x, const Axes& axes, bool keepdims) { return reduce(ReduceOp::Sum, x, axes, keepdims); }
Tensor amax(const Tensor& x, const Axes& axes, bool keepdims) { return reduce(ReduceOp::Max, x, axes, keepdims); }
Tensor amin(const Tensor& x, const Axes& axes, bool keepdims) { return reduce(ReduceOp::Min, x, axes, keepdims); }

static int64_t count(const Tensor& x, const Axes& axes_in, const char* op) {
  int64_t n = 1;
  for (int64_t a : normalize_axes(axes_in, x.ndim(), op)) n *= x.shape()[a];
  return n;
}

Tensor mean(const Tensor& x, const Axes& axes, bool keepdims) {
  Tensor xf = is_floating(x.dtype()) ? x : astype(x, DType::Float32);
  int64_t n = count(x, axes, "mean");
  return mul_scalar(sum(xf, axes, keepdims), n ? 1.0 / double(n) : std::nan(""));
}

Tensor var(const Tensor& x, const Axes& axes, bool keepdims, int64_t ddof) {
  Tensor xf = is_floating(x.dtype()) ? x : astype(x, DType::Float32);
  int64_t n = count(x, axes, "var");
  Tensor d = sub(xf, mean(xf, axes, /*keepdims=*/true));
  double denom = double(n - ddof);
  return mul_scalar(sum(mul(d, d), axes, keepdims), denom > 0 ? 1.0 / denom : std::nan(""));
}

// max over axes, with +-inf replaced by 0 so that x - m stays finite; no gradient (a shift).
// Over an empty axis there is no max and nothing to shift: 0, so that logsumexp gives log(0) =
// -inf and softmax an empty result, as in numpy/scipy and PyTorch.
static Tensor stable_shift(const Tensor& x, const Axes& axes) {
  autograd::NoGradGuard no_grad;
  for (int64_t a : axes)
    if (x.shape()[a] == 0)
      return Tensor::zeros(reduced_shape(x.shape(), axes, /*keepdims=*/true), x.dtype(), x.device());
  Tensor m = amax(x.detach(), axes, /*keepdims=*/true);
  Tensor finite = binary(BinaryOp::Eq, sub(m, m), scalar_like(0, m));
  return where(finite, m, scalar_like(0, m));
}

Tensor logsumexp(const Tensor& x, const Axes& axes_in, bool keepdims) {
  Tensor xf = is_floating(x.dtype()) ? x : astype(x, DType::Float32);
  Axes axes = normalize_axes(axes_in, x.ndim(), "logsumexp");
  Tensor m = stable_shift(xf, axes);
  Tensor s = unary(UnaryOp::Log, sum(unary(UnaryOp::Exp, sub(xf, m)), axes, /*keepdims=*/true));
  Tensor out = add(s, m);
  return keepdims ? out : reshape(out, reduced_shape(x.shape(), axes, false));
}

Tensor softmax(const Tensor& x, int64_t axis) {
  Tensor xf = is_floating(x.dtype()) ? x : astype(x, DType::Float32);
  const Axes axes = normalize_axes({axis}, x.ndim(), "softmax");  // none for a 0-d x: softmax is 1
  // Over the last axis of a CPU tensor, without a gradient to record (inference, attention at
  // batch 1): one kernel pass per row, not the seven ops below (their passes and allocations
  // took 3x as long on a transformer's 128x128 attention rows).
  if (axes.size() == 1 && axes[0] == x.ndim() - 1 && xf.device().is_cpu() && x.numel() > 0 &&
      (xf.dtype() == DType::Float32 || xf.dtype() == DType::Float64) && !autograd::would_record({xf})) {
    Tensor xc = contiguous(xf), y = Tensor::empty(x.shape(), xf.dtype());
    cpu::kernels().softmax_rows(y, xc);
    return y;
  }
  Tensor e = unary(UnaryOp::Exp, sub(xf, stable_shift(xf, axes)));
  return div(e, sum(e, axes, /*keepdims=*/true));
}

Tensor log_softmax(const Tensor& x, int64_t axis) {
  Tensor xf = is_floating(x.dtype()) ? x : astype(x, DType::Float32);
  const Axes axes = normalize_axes({axis}, x.ndim(), "log_softmax");
  // (x - m) - log(sum(exp(x - m))): subtracting the shift first keeps float32 precision when
  // |x| is large (x - logsumexp(x) would cancel two nearly equal numbers).
  Tensor shifted = sub(xf, stable_shift(xf, axes));
  return sub(shifted, unary(UnaryOp::Log, sum(unary(UnaryOp::Exp, shifted), axes, /*keepdims=*/true)));
}

Tensor argmax(const Tensor& x, std::optional<int64_t> axis, bool keepdims) {
  Tensor xc = cast(x.detach(), compute_dtype(x.dtype()));
  if (!axis) {
    NX_CHECK(x.numel() > 0, "argmax: attempt to get argmax of an empty tensor");
    Tensor flat = contiguous(reshape(xc, {x.numel()}));
    Tensor out = Tensor::empty(keepdims ? Shape(size_t(x.ndim()), 1) : Shape{}, DType::Int64, x.device());
    kernel::argmax(out, flat, 1, x.numel());
    return out;
  }
  int64_t a = wrap_axis(*axis, x.ndim(), "argmax");
  if (x.ndim() == 0) return full(Shape{}, 0, DType::Int64, x.device());
  int64_t n = x.shape()[a];
  NX_CHECK(n > 0, "argmax: zero-size axis ", a, " of shape ", shape_str(x.shape()));
  std::vector<int64_t> perm;  // move axis a to the end, keeping the others in order
  for (int64_t d = 0; d < x.ndim(); ++d)
    if (d != a) perm.push_back(d);
  perm.push_back(a);
  Tensor moved = contiguous(permute(xc, perm));
  Tensor out = Tensor::empty(reduced_shape(x.shape(), {a}, keepdims), DType::Int64, x.device());
  kernel::argmax(out, moved, x.numel() / n, n);
  return out;
}

}  // namespace nexus::ops
