// Backward rules for every differentiable primitive, in one table: the eager tape's closures over
// the rules of derivative_rules.h (which graph autodiff instantiates on graph values), and the
// gradient kernels that both the closures and the graph's backward nodes call. Composite ops
// (mean, var, softmax, layer_norm, ...) need no eager entry: their primitives carry the gradient.
// Rules run under no-grad and build plain tensors.
#include "ops/derivatives.h"

#include <algorithm>

#include "ops/cpu/kernels.h"
#include "ops/derivative_rules.h"
#include "ops/dispatch.h"
#include "ops/internal.h"

namespace nexus::ops::grad {

using Grads = std::vector<Tensor>;
using Needs = std::vector<bool>;

Tensor reduce_to(const Tensor& g, const Tensor& like) {
  Tensor r = sum_to(g, like.shape());
  return r.dtype() == like.dtype() ? r : cast(r, like.dtype());
}

// A tensor's shape and dtype without its data: what reduce_to needs of an input it does not read.
static Tensor meta_only(const Tensor& t) { return Tensor::view_of(nullptr, 0, t.shape(), t.strides(), t.dtype()); }

// Keeps t (detached) when the rule reads it, else only its metadata.
static Tensor keep(bool reads, const Tensor& t) { return reads ? t.detach() : meta_only(t); }

Saves saves(UnaryOp op) {
  switch (op) {
    // relu's mask comes from its output (out > 0 exactly where x > 0), as torch's
    // threshold_backward: the pre-activation need not outlive the forward.
    case UnaryOp::Exp:
    case UnaryOp::Sqrt:
    case UnaryOp::Tanh:
    case UnaryOp::Sigmoid:
    case UnaryOp::Relu: return {false, false, true};
    case UnaryOp::Neg: return {false, false, false};
    default: return {true, false, false};
  }
}

Saves saves(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add:
    case BinaryOp::Sub:
    case BinaryOp::FloorDiv: return {false, false, false};
    case BinaryOp::Div: return {false, true, true};
    case BinaryOp::Pow: return {true, true, true};
    default: return {true, true, false};
  }
}

// A tensor of `shape` without data: what a rule reads of an input it only needs the shape of.
static Tensor meta(const Shape& shape, DType dtype) {
  return Tensor::view_of(nullptr, 0, shape, contiguous_strides(shape), dtype);
}

Tensor slice_grad(const Tensor& g, const Shape& in_shape, int64_t axis, int64_t start, int64_t stop, int64_t step) {
  Tensor out = Tensor::zeros(in_shape, g.dtype(), g.device());
  copy_(ops::slice(out, axis, start, stop, step), g);
  return out;
}

Tensor index_select_grad(const Tensor& g, const Tensor& index, const Shape& in_shape) {
  return index_add(Tensor::zeros(in_shape, g.dtype(), g.device()), index, g);
}

// The rules of derivative_rules.h on tensors (they run under no-grad: nothing records).
struct TensorAlgebra {
  Tensor unary(UnaryOp op, const Tensor& x) { return ops::unary(op, x); }
  Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) { return ops::binary(op, a, b); }
  Tensor scalar(double v, const Tensor& like) { return scalar_like(v, like); }
  Tensor cast_like(const Tensor& x, const Tensor& like) { return cast(x, like.dtype()); }
  Shape shape(const Tensor& x) { return x.shape(); }
  Tensor matmul(const Tensor& a, const Tensor& b) { return ops::matmul(a, b); }
  Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) { return ops::permute(x, dims); }
  Tensor reshape(const Tensor& x, const Shape& shape) { return ops::reshape(x, shape); }
  Tensor expand_like(const Tensor& x, const Tensor& like) { return ops::expand(x, like.shape()); }
  Tensor sum(const Tensor& x, const Axes& axes, bool keepdims) { return ops::sum(x, axes, keepdims); }
  Tensor mean(const Tensor& x, const Axes& axes, bool keepdims) { return ops::mean(x, axes, keepdims); }
  Tensor reduce_to(const Tensor& g, const Tensor& like) { return grad::reduce_to(g, like); }
  Tensor where(const Tensor& c, const Tensor& a, const Tensor& b) { return ops::where(c, a, b); }
  Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t stop, int64_t step) {
    return ops::slice(x, axis, start, stop, step);
  }
  Tensor select(const Tensor& x, int64_t axis, int64_t index) { return ops::select(x, axis, index); }
  Tensor slice_grad(const Tensor& g, const Tensor& like, int64_t axis, int64_t start, int64_t stop, int64_t step) {
    return grad::slice_grad(g, like.shape(), axis, start, stop, step);
  }
  Tensor index_select_grad(const Tensor& g, const Tensor& index, const Tensor& like) {
    return grad::index_select_grad(g, index, like.shape());
  }
};

BackwardFn unary(UnaryOp op, const Tensor& x_in, const Tensor& out_in) {
  Saves s = saves(op);
  return [op, x = keep(s.a, x_in), out = keep(s.out, out_in)](const Tensor& g, const Needs&) -> Grads {
    TensorAlgebra k;
    return {unary_rule(k, op, x, out, g)};
  };
}

BackwardFn binary(BinaryOp op, const Tensor& a_in, const Tensor& b_in, const Tensor& out_in) {
  Saves s = saves(op);
  return [op, a = keep(s.a, a_in), b = keep(s.b, b_in), out = keep(s.out, out_in)](const Tensor& g,
                                                                                   const Needs& need) -> Grads {
    TensorAlgebra k;
    auto [ga, gb] = binary_rule(k, op, a, b, out, g, {need[0], need[1]});
    return {need[0] ? reduce_to(ga, a) : Tensor(), need[1] ? reduce_to(gb, b) : Tensor()};
  };
}

BackwardFn where(const Tensor& cond, const Tensor& a_in, const Tensor& b_in) {
  return [c = cond.detach(), a = meta_only(a_in), b = meta_only(b_in)](const Tensor& g, const Needs& need) -> Grads {
    TensorAlgebra k;
    auto [ga, gb] = where_rule(k, c, a, b, g, {need[1], need[2]});
    return {Tensor(), need[1] ? ga : Tensor(), need[2] ? gb : Tensor()};
  };
}

BackwardFn astype(DType from) {
  return [from](const Tensor& g, const Needs&) -> Grads { return {cast(g, from)}; };
}

BackwardFn reshape(const Shape& in_shape) {
  return [in_shape](const Tensor& g, const Needs&) -> Grads { return {ops::reshape(g, in_shape)}; };
}

BackwardFn permute(const std::vector<int64_t>& dims) {
  return [inv = inverse_permutation(dims)](const Tensor& g, const Needs&) -> Grads { return {ops::permute(g, inv)}; };
}

BackwardFn expand(const Shape& in_shape) {
  return [in_shape](const Tensor& g, const Needs&) -> Grads { return {reduce_to(g, meta(in_shape, g.dtype()))}; };
}

BackwardFn slice(const Shape& in_shape, int64_t axis, int64_t start, int64_t step) {
  return [=](const Tensor& g, const Needs&) -> Grads {
    int64_t len = g.shape()[axis];
    return {slice_grad(g, in_shape, axis, start, len ? start + (len - 1) * step + 1 : start, step)};
  };
}

BackwardFn index_select(const Shape& in_shape, const Tensor& index) {
  return [in_shape, index](const Tensor& g, const Needs&) -> Grads { return {index_select_grad(g, index, in_shape)}; };
}

BackwardFn concat(const std::vector<Shape>& shapes, int64_t axis) {
  std::vector<int64_t> lengths;
  for (const Shape& s : shapes) lengths.push_back(s[size_t(axis)]);
  return [lengths, axis](const Tensor& g, const Needs& need) -> Grads {
    TensorAlgebra k;
    Grads out = concat_rule(k, g, lengths, axis, need);
    for (size_t i = 0; i < out.size(); ++i)
      if (!need[i]) out[i] = Tensor();
    return out;
  };
}

BackwardFn sum(const Shape& in_shape, const Axes& axes, bool keepdims) {
  return [=](const Tensor& g, const Needs&) -> Grads {
    TensorAlgebra k;
    return {sum_rule(k, meta(in_shape, g.dtype()), g, axes, keepdims)};
  };
}

BackwardFn extremum(const Tensor& x_in, const Tensor& out, const Axes& axes, bool keepdims) {
  return [x = x_in.detach(), out, axes, keepdims](const Tensor& g, const Needs&) -> Grads {
    TensorAlgebra k;
    return {extremum_rule(k, x, out, g, axes, keepdims)};
  };
}

BackwardFn matmul(const Tensor& a_in, const Tensor& b_in) {
  return [a = a_in.detach(), b = b_in.detach()](const Tensor& g, const Needs& need) -> Grads {
    TensorAlgebra k;
    auto [ga, gb] = matmul_rule(k, a, b, g, {need[0], need[1]});
    return {need[0] ? ga : Tensor(), need[1] ? gb : Tensor()};
  };
}

Grads conv2d_grad(const Tensor& gy, const Tensor& x, const Tensor& w, const Conv2dGeometry& g, const Needs& need) {
  DType cdt = compute_dtype(promote_types(x.dtype(), w.dtype()));
  Tensor xc = contiguous(cast(x, cdt)), wc = contiguous(cast(w, cdt)), dy = contiguous(cast(gy, cdt));
  const Device dev = dy.device();
  Tensor dx = need[0] ? Tensor::empty(x.shape(), cdt, dev) : Tensor();
  Tensor dw = need[1] ? Tensor::empty(w.shape(), cdt, dev) : Tensor();
  Tensor db = need[2] ? Tensor::empty({g.k}, cdt, dev) : Tensor();
  kernel::conv2d_backward(g, xc, wc, dy, dx, dw, db);
  return {need[0] ? cast(dx, x.dtype()) : dx, need[1] ? cast(dw, w.dtype()) : dw, db};
}

Grads conv2d_grad(const Tensor& gy, const Tensor& x, const Tensor& w, const std::vector<int64_t>& ints,
                  const Needs& need) {
  return conv2d_grad(gy, x, w, conv2d_geometry(x.shape(), w.shape(), ints[0], ints[1], ints[2], ints[3], ints[4]),
                     need);
}

BackwardFn conv2d(const Tensor& x_in, const Tensor& w_in, const Conv2dGeometry& g) {
  return [x = x_in.detach(), w = w_in.detach(), g](const Tensor& gy, const Needs& need) -> Grads {
    return conv2d_grad(gy, x, w, g, need);
  };
}

Tensor max_pool2d_grad(const Tensor& gy, const Tensor& argmax, const Pool2dGeometry& g) {
  DType cdt = compute_dtype(gy.dtype());
  Tensor dy = contiguous(cast(gy, cdt));
  Tensor dx = Tensor::empty({g.n, g.c, g.h, g.w}, cdt, dy.device());
  kernel::max_pool2d_backward(g, dy, argmax, dx);
  return cast(dx, gy.dtype());
}

static Pool2dGeometry pool_geometry(const Shape& in, const std::vector<int64_t>& window) {
  return {in[0], in[1], in[2], in[3], window[0], window[1], window[2], window[3], 0};
}

Tensor max_pool2d_grad(const Tensor& gy, const Tensor& x, const std::vector<int64_t>& window) {
  // The forward's argmax, found again: a graph keeps x (the window's maxima) instead of it.
  Pool2dGeometry g = pool_geometry(x.shape(), window);
  DType cdt = compute_dtype(x.dtype());
  Tensor xc = contiguous(cast(x, cdt));
  Tensor out = Tensor::empty({g.n, g.c, g.out_h(), g.out_w()}, cdt, x.device());
  Tensor argmax = Tensor::empty(out.shape(), DType::Int64, x.device());
  kernel::max_pool2d_forward(g, xc, out, argmax);
  return max_pool2d_grad(gy, argmax, g);
}

BackwardFn max_pool2d(const Tensor& argmax, const Pool2dGeometry& g) {
  return [argmax, g](const Tensor& gy, const Needs&) -> Grads { return {max_pool2d_grad(gy, argmax, g)}; };
}

Tensor avg_pool2d_grad(const Tensor& gy, const Pool2dGeometry& g) {
  DType cdt = compute_dtype(gy.dtype());
  Tensor dy = contiguous(cast(gy, cdt));
  Tensor dx = Tensor::empty({g.n, g.c, g.h, g.w}, cdt, dy.device());
  kernel::avg_pool2d_backward(g, dy, dx);
  return cast(dx, gy.dtype());
}

Tensor avg_pool2d_grad(const Tensor& gy, const std::vector<int64_t>& window_and_size) {
  Pool2dGeometry g =
      pool_geometry({gy.shape()[0], gy.shape()[1], window_and_size[4], window_and_size[5]}, window_and_size);
  return avg_pool2d_grad(gy, g);
}

BackwardFn avg_pool2d(const Pool2dGeometry& g) {
  return [g](const Tensor& gy, const Needs&) -> Grads { return {avg_pool2d_grad(gy, g)}; };
}

Tensor cross_entropy_grad(const Tensor& gy, const Tensor& x, const Tensor& labels, const Tensor& stats,
                          ReduceOp reduction, DType logits_dtype) {
  const int64_t n = x.shape()[0];
  Tensor g = contiguous(cast(gy, x.dtype()));
  if (reduction == ReduceOp::Mean) g = mul_scalar(g, 1.0 / double(std::max<int64_t>(n, 1)));
  Tensor dx = Tensor::empty(x.shape(), x.dtype());
  cpu::kernels().xent_backward(x, labels, stats, g, reduction == ReduceOp::None, dx);
  return cast(dx, logits_dtype);
}

// On a device: (softmax - one-hot labels) * the incoming gradient, from the primitives, as the
// forward's composed form (ops/nn.cpp), until the device has the fused kernel of the host.
static Tensor cross_entropy_grad_composed(const Tensor& gy, const Tensor& logits, const Tensor& labels,
                                          ReduceOp reduction) {
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  const DType cdt = compute_dtype(logits.dtype());
  Tensor classes = to_device(arange(0, double(c), 1, DType::Int64), logits.device());
  Tensor onehot = binary(BinaryOp::Eq, ops::reshape(cast(labels, DType::Int64), {n, 1}), ops::reshape(classes, {1, c}));
  Tensor g = cast(gy, cdt);
  if (reduction == ReduceOp::None) g = ops::reshape(g, {n, 1});
  if (reduction == ReduceOp::Mean) g = mul_scalar(g, 1.0 / double(std::max<int64_t>(n, 1)));
  Tensor dx = mul(binary(BinaryOp::Sub, softmax(cast(logits, cdt), 1), cast(onehot, cdt)), g);
  return cast(dx, logits.dtype());
}

Tensor cross_entropy_grad(const Tensor& gy, const Tensor& logits, const Tensor& labels, ReduceOp reduction) {
  if (!logits.device().is_cpu()) return cross_entropy_grad_composed(gy, logits, labels, reduction);
  // The forward's statistics, computed again from the logits (one pass over them).
  const int64_t n = logits.shape()[0];
  Tensor x = contiguous(cast(logits, compute_dtype(logits.dtype())));
  Tensor lab = contiguous(cast(labels, DType::Int64));
  Tensor nll = Tensor::empty({n}, x.dtype()), stats = Tensor::empty({2, n}, x.dtype());
  cpu::kernels().xent_forward(x, lab, nll, stats);
  return cross_entropy_grad(gy, x, lab, stats, reduction, logits.dtype());
}

BackwardFn cross_entropy(const Tensor& x, const Tensor& labels, const Tensor& stats, ReduceOp reduction,
                         DType logits_dtype) {
  return [x, labels, stats, reduction, logits_dtype](const Tensor& gy, const Needs&) -> Grads {
    return {cross_entropy_grad(gy, x, labels, stats, reduction, logits_dtype)};
  };
}

}  // namespace nexus::ops::grad
