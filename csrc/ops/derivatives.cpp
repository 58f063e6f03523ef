// Backward rules for every differentiable primitive, in one table. Composite ops (mean, var,
// softmax, layer_norm, ...) need no entry: their primitives carry the gradient.
// Rules run under no-grad and build plain tensors.
#include "ops/derivatives.h"

#include <algorithm>

#include "ops/cpu/softmax_xent_kernel.h"
#include "ops/derivative_rules.h"
#include "ops/internal.h"

namespace nexus::ops::grad {

using Grads = std::vector<Tensor>;
using Needs = std::vector<bool>;

Tensor reduce_to(const Tensor& g, const Tensor& like) {
  Tensor r = sum_to(g, like.shape());
  return r.dtype() == like.dtype() ? r : cast(r, like.dtype());
}

// A tensor's shape and dtype without its data: what reduce_to needs of an input it does not read.
static Tensor meta_only(const Tensor& t) {
  return Tensor::view_of(nullptr, 0, t.shape(), t.strides(), t.dtype());
}

// Keeps t (detached) when the rule reads it, else only its metadata.
static Tensor keep(bool reads, const Tensor& t) { return reads ? t.detach() : meta_only(t); }

Saves saves(UnaryOp op) {
  switch (op) {
    // relu's mask comes from its output (out > 0 exactly where x > 0), as torch's
    // threshold_backward: the pre-activation need not outlive the forward.
    case UnaryOp::Exp: case UnaryOp::Sqrt: case UnaryOp::Tanh: case UnaryOp::Sigmoid: case UnaryOp::Relu:
      return {false, false, true};
    case UnaryOp::Neg: return {false, false, false};
    default: return {true, false, false};
  }
}

Saves saves(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: case BinaryOp::Sub: case BinaryOp::FloorDiv: return {false, false, false};
    case BinaryOp::Div: return {false, true, true};
    case BinaryOp::Pow: return {true, true, true};
    default: return {true, true, false};
  }
}

// The rules of derivative_rules.h on tensors (they run under no-grad: nothing records).
struct TensorAlgebra {
  Tensor unary(UnaryOp op, const Tensor& x) { return ops::unary(op, x); }
  Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) { return ops::binary(op, a, b); }
  Tensor scalar(double v, const Tensor& like) { return scalar_like(v, like); }
  Tensor cast_like(const Tensor& x, const Tensor& like) { return cast(x, like.dtype()); }
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
  return [op, a = keep(s.a, a_in), b = keep(s.b, b_in), out = keep(s.out, out_in)](
             const Tensor& g, const Needs& need) -> Grads {
    TensorAlgebra k;
    auto [ga, gb] = binary_rule(k, op, a, b, out, g, {need[0], need[1]});
    return {need[0] ? reduce_to(ga, a) : Tensor(), need[1] ? reduce_to(gb, b) : Tensor()};
  };
}

BackwardFn where(const Tensor& cond, const Tensor& a_in, const Tensor& b_in) {
  return [c = cond.detach(), a = a_in.detach(), b = b_in.detach()](const Tensor& g, const Needs& need) -> Grads {
    Tensor zero = scalar_like(0, g);
    return {Tensor(), need[1] ? reduce_to(ops::where(c, g, zero), a) : Tensor(),
            need[2] ? reduce_to(ops::where(c, zero, g), b) : Tensor()};
  };
}

BackwardFn astype(DType from) {
  return [from](const Tensor& g, const Needs&) -> Grads { return {cast(g, from)}; };
}

BackwardFn reshape(const Shape& in_shape) {
  return [in_shape](const Tensor& g, const Needs&) -> Grads { return {ops::reshape(g, in_shape)}; };
}

BackwardFn permute(const std::vector<int64_t>& dims) {
  std::vector<int64_t> inv(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inv[size_t(dims[i])] = int64_t(i);
  return [inv](const Tensor& g, const Needs&) -> Grads { return {ops::permute(g, inv)}; };
}

BackwardFn expand(const Shape& in_shape) {
  return [in_shape](const Tensor& g, const Needs&) -> Grads { return {sum_to(g, in_shape)}; };
}

BackwardFn slice(const Shape& in_shape, int64_t axis, int64_t start, int64_t step) {
  return [=](const Tensor& g, const Needs&) -> Grads {
    Tensor out = Tensor::zeros(in_shape, g.dtype());
    int64_t stop = start + (g.shape()[axis] - 1) * step + 1;
    copy_(ops::slice(out, axis, start, g.shape()[axis] ? stop : start, step), g);
    return {out};
  };
}

BackwardFn index_select(const Shape& in_shape, const Tensor& index) {
  return [in_shape, index](const Tensor& g, const Needs&) -> Grads {
    return {index_add(Tensor::zeros(in_shape, g.dtype()), index, g)};
  };
}

BackwardFn concat(const std::vector<Shape>& shapes, int64_t axis) {
  return [shapes, axis](const Tensor& g, const Needs& need) -> Grads {
    Grads out;
    int64_t at = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      int64_t len = shapes[i][axis];
      out.push_back(need[i] ? ops::slice(g, axis, at, at + len, 1) : Tensor());
      at += len;
    }
    return out;
  };
}

// Reinserts reduced axes as size-1 dims so g broadcasts against the input.
static Tensor unreduce(const Tensor& g, const Shape& in_shape, const Axes& axes, bool keepdims) {
  return keepdims ? g : ops::reshape(g, reduced_shape(in_shape, axes, true));
}

BackwardFn sum(const Shape& in_shape, const Axes& axes, bool keepdims) {
  return [=](const Tensor& g, const Needs&) -> Grads {
    return {ops::expand(unreduce(g, in_shape, axes, keepdims), in_shape)};
  };
}

BackwardFn extremum(const Tensor& x_in, const Tensor& out, const Axes& axes, bool keepdims) {
  return [x = x_in.detach(), out, axes, keepdims](const Tensor& g, const Needs&) -> Grads {
    Tensor hit = cast(binary(BinaryOp::Eq, x, unreduce(out, x.shape(), axes, keepdims)), g.dtype());
    Tensor count = ops::sum(hit, axes, true);
    return {mul(div(hit, count), unreduce(g, x.shape(), axes, keepdims))};
  };
}

static Tensor mT(const Tensor& t) { return transpose(t, -1, -2); }

BackwardFn matmul(const Tensor& a_in, const Tensor& b_in) {
  return [a = a_in.detach(), b = b_in.detach()](const Tensor& g, const Needs& need) -> Grads {
    return {need[0] ? reduce_to(ops::matmul(g, mT(b)), a) : Tensor(),
            need[1] ? reduce_to(ops::matmul(mT(a), g), b) : Tensor()};
  };
}

}  // namespace nexus::ops::grad

namespace nexus::ops::grad {

BackwardFn conv2d(const Tensor& x_in, const Tensor& w_in, const Conv2dGeometry& g) {
  return [x = x_in.detach(), w = w_in.detach(), g](const Tensor& gy, const Needs& need) -> Grads {
    DType cdt = compute_dtype(promote_types(x.dtype(), w.dtype()));
    Tensor xc = contiguous(cast(x, cdt)), wc = contiguous(cast(w, cdt)), dy = contiguous(cast(gy, cdt));
    Tensor dx = need[0] ? Tensor::empty(x.shape(), cdt) : Tensor();
    Tensor dw = need[1] ? Tensor::empty(w.shape(), cdt) : Tensor();
    Tensor db = need[2] ? Tensor::empty({g.k}, cdt) : Tensor();
    dispatch_float(cdt, "conv2d backward", [&](auto t) {
      using T = decltype(t);
      auto ptr = [](const Tensor& v) { return v.defined() ? v.data<T>() : nullptr; };
      conv2d_backward<T>(g, xc.data<T>(), wc.data<T>(), dy.data<T>(), ptr(dx), ptr(dw), ptr(db));
    });
    return {need[0] ? cast(dx, x.dtype()) : dx, need[1] ? cast(dw, w.dtype()) : dw, db};
  };
}

BackwardFn max_pool2d(const Tensor& argmax, const Pool2dGeometry& g) {
  return [argmax, g](const Tensor& gy, const Needs&) -> Grads {
    DType cdt = compute_dtype(gy.dtype());
    Tensor dy = contiguous(cast(gy, cdt));
    Tensor dx = Tensor::empty({g.n, g.c, g.h, g.w}, cdt);
    dispatch_float(cdt, "max_pool2d backward", [&](auto t) {
      using T = decltype(t);
      max_pool2d_backward<T>(g, dy.data<T>(), argmax.data<int64_t>(), dx.data<T>());
    });
    return {cast(dx, gy.dtype())};
  };
}

BackwardFn cross_entropy(const Tensor& x, const Tensor& labels, const Tensor& stats, ReduceOp reduction,
                         DType logits_dtype) {
  return [x, labels, stats, reduction, logits_dtype](const Tensor& gy, const Needs&) -> Grads {
    int64_t n = x.shape()[0], c = x.shape()[1];
    Tensor g = contiguous(cast(gy, x.dtype()));
    if (reduction == ReduceOp::Mean) g = mul_scalar(g, 1.0 / double(std::max<int64_t>(n, 1)));
    Tensor dx = Tensor::empty(x.shape(), x.dtype());
    dispatch_float(x.dtype(), "cross_entropy backward", [&](auto t) {
      using T = decltype(t);
      cpu::xent_backward<T>(x.data<T>(), labels.data<int64_t>(), stats.data<T>(), stats.data<T>() + n, g.data<T>(),
                            reduction == ReduceOp::None ? 1 : 0, n, c, dx.data<T>());
    });
    return {cast(dx, logits_dtype)};
  };
}

BackwardFn avg_pool2d(const Pool2dGeometry& g) {
  return [g](const Tensor& gy, const Needs&) -> Grads {
    DType cdt = compute_dtype(gy.dtype());
    Tensor dy = contiguous(cast(gy, cdt));
    Tensor dx = Tensor::empty({g.n, g.c, g.h, g.w}, cdt);
    dispatch_float(cdt, "avg_pool2d backward", [&](auto t) {
      using T = decltype(t);
      avg_pool2d_backward<T>(g, dy.data<T>(), dx.data<T>());
    });
    return {cast(dx, gy.dtype())};
  };
}

}  // namespace nexus::ops::grad
