// The backward rules, written once over an algebra A of values V. Eager tensors
// (derivatives.cpp: A computes) and graph values (graph/passes/autodiff.cpp: A appends IR nodes,
// which the fusion pass then groups) instantiate the same expressions, so the compiled backward
// and the eager tape agree op for op.
//
// A provides: V unary(UnaryOp, V); V binary(BinaryOp, V, V); V scalar(double, V like) (a 0-d
// value in like's dtype); V cast_like(V, V like) (V converted to like's dtype); Shape shape(V)
// (in a graph, dim 0 may be the symbolic batch, a negative size); V matmul(V, V); V permute(V,
// dims); V reshape(V, Shape); V expand_like(V, V like) (broadcast to like's shape); V sum(V, Axes,
// keepdims) and V mean(V, Axes, keepdims) (axes sorted and in range); V reduce_to(V, V like) (a
// gradient at a broadcast shape summed back to like's shape and dtype); V where(V, V, V);
// V slice(V, axis, start, stop, step); V select(V, axis, index); V slice_grad(V g, V like, axis,
// start, stop, step) (zeros of like's shape with g in that slice); V index_select_grad(V g,
// V index, V like) (g's rows added into zeros of like's shape).
// Elementwise rules return gradients at the broadcast (output) shape and callers reduce them to
// each input; the other rules return each input's gradient at its shape. Rules for the composite
// ops (softmax, layer_norm, ...) serve the graph, where such an op is one node; on the eager tape
// their primitives carry the gradient.
#pragma once

#include <array>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "ops/op_kind.h"
#include "tensor/shape.h"

namespace nexus::ops::grad {

// d unary(op, x) / dx applied to g; x and out are what saves(op) says the rule reads.
template <class A, class V> V unary_rule(A& k, UnaryOp op, const V& x, const V& out, const V& g) {
  using U = UnaryOp;
  using B = BinaryOp;
  switch (op) {
    case U::Neg: return k.unary(U::Neg, g);
    case U::Exp: return k.binary(B::Mul, g, out);
    case U::Log: return k.binary(B::Div, g, x);
    case U::Sqrt: return k.binary(B::Div, k.binary(B::Mul, g, k.scalar(0.5, g)), out);
    case U::Tanh: return k.binary(B::TanhGrad, g, out);
    case U::Sigmoid: return k.binary(B::SigmoidGrad, g, out);
    case U::Relu: return k.binary(B::ReluGrad, g, out);
    case U::Gelu: return k.binary(B::Mul, g, k.unary(U::GeluGrad, x));
    case U::Sin: return k.binary(B::Mul, g, k.unary(U::Cos, x));
    case U::Cos: return k.unary(U::Neg, k.binary(B::Mul, g, k.unary(U::Sin, x)));
    case U::Abs: return k.binary(B::Mul, g, k.unary(U::Sign, x));
    case U::Erf:  // 2/sqrt(pi) e^{-x^2}
      return k.binary(
          B::Mul, g,
          k.binary(B::Mul, k.unary(U::Exp, k.unary(U::Neg, k.binary(B::Mul, x, x))), k.scalar(1.1283791670955126, g)));
    case U::GeluGrad:
    case U::Sign: break;
  }
  NX_ASSERT(false, "no derivative for ", op_name(op));
  return g;
}

// d max(a, b): the larger side gets the gradient; ties split it evenly (as torch).
template <class A, class V> V extremum_share(A& k, BinaryOp cmp, const V& a, const V& b, const V& g) {
  V win = k.cast_like(k.binary(cmp, a, b), g);
  V tie = k.cast_like(k.binary(BinaryOp::Eq, a, b), g);
  return k.binary(BinaryOp::Mul, g, k.binary(BinaryOp::Add, win, k.binary(BinaryOp::Mul, tie, k.scalar(0.5, tie))));
}

// The gradients of binary(op, a, b) for the inputs marked in need (the others are left as g).
template <class A, class V> std::array<V, 2> binary_rule(A& k, BinaryOp op, const V& a, const V& b, const V& out,
                                                         const V& g, std::array<bool, 2> need) {
  using B = BinaryOp;
  V ga = g, gb = g;
  switch (op) {
    case B::Add: break;
    case B::Sub:
      if (need[1]) gb = k.unary(UnaryOp::Neg, g);
      break;
    case B::Mul:
      if (need[0]) ga = k.binary(B::Mul, g, b);
      if (need[1]) gb = k.binary(B::Mul, g, a);
      break;
    case B::Div:
      if (need[0]) ga = k.binary(B::Div, g, b);
      if (need[1]) gb = k.unary(UnaryOp::Neg, k.binary(B::Div, k.binary(B::Mul, g, out), b));
      break;
    case B::Pow:
      if (need[0])
        ga = k.binary(B::Mul, g, k.binary(B::Mul, b, k.binary(B::Pow, a, k.binary(B::Sub, b, k.scalar(1, b)))));
      if (need[1]) gb = k.binary(B::Mul, g, k.binary(B::Mul, out, k.unary(UnaryOp::Log, a)));
      break;
    case B::FloorDiv:  // piecewise constant: zero wherever it is differentiable (as torch)
      if (need[0]) ga = k.binary(B::Mul, g, k.scalar(0, g));
      if (need[1]) gb = k.binary(B::Mul, g, k.scalar(0, g));
      break;
    case B::Remainder:  // a - floor_divide(a, b) * b: d/da = 1, d/db = -floor_divide(a, b)
      if (need[1]) gb = k.unary(UnaryOp::Neg, k.binary(B::Mul, g, k.binary(B::FloorDiv, a, b)));
      break;
    case B::Maximum:
    case B::Minimum: {
      const B cmp = op == B::Maximum ? B::Gt : B::Lt;
      if (need[0]) ga = extremum_share(k, cmp, a, b, g);
      if (need[1]) gb = extremum_share(k, cmp, b, a, g);
      break;
    }
    default: NX_ASSERT(false, "no derivative for ", op_name(op));
  }
  return {ga, gb};
}

// ---- views, reductions, matmul -------------------------------------------------------------

using RuleAxes = std::vector<int64_t>;

// `in` with the reduced axes kept as size 1: a reduction's gradient reshaped to broadcast against
// its input.
inline Shape kept_shape(Shape in, const RuleAxes& axes) {
  for (int64_t a : axes) in[size_t(a)] = 1;
  return in;
}

template <class A, class V> V unreduce(A& k, const V& g, const Shape& in, const RuleAxes& axes, bool keepdims) {
  return keepdims ? g : k.reshape(g, kept_shape(in, axes));
}

template <class A, class V> V transpose_last(A& k, const V& x) {
  std::vector<int64_t> dims(k.shape(x).size());
  std::iota(dims.begin(), dims.end(), int64_t(0));
  std::swap(dims[dims.size() - 1], dims[dims.size() - 2]);
  return k.permute(x, dims);
}

// a @ b on operands of two or more dims (batch dims broadcast).
template <class A, class V>
std::array<V, 2> matmul_rule(A& k, const V& a, const V& b, const V& g, std::array<bool, 2> need) {
  V ga = g, gb = g;
  if (need[0]) ga = k.reduce_to(k.matmul(g, transpose_last(k, b)), a);
  if (need[1]) gb = k.reduce_to(k.matmul(transpose_last(k, a), g), b);
  return {ga, gb};
}

inline std::vector<int64_t> inverse_permutation(const std::vector<int64_t>& dims) {
  std::vector<int64_t> inv(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inv[size_t(dims[i])] = int64_t(i);
  return inv;
}

// sum(x, axes, keepdims): g broadcast back over the reduced axes (x is read for its shape only).
template <class A, class V> V sum_rule(A& k, const V& x, const V& g, const RuleAxes& axes, bool keepdims) {
  return k.expand_like(unreduce(k, g, k.shape(x), axes, keepdims), x);
}

// g divided by the number of elements `axes` of x hold, less ddof. A batch axis has no size
// until run time: the graph then counts it.
template <class A, class V> V per_count(A& k, const V& x, const V& g, const RuleAxes& axes, double ddof) {
  const Shape s = k.shape(x);
  double n = 1;
  bool known = true;
  for (int64_t a : axes) {
    known = known && s[size_t(a)] >= 0;
    n *= double(s[size_t(a)]);
  }
  if (known) return k.binary(BinaryOp::Mul, g, k.scalar(1.0 / (n - ddof), g));
  V count = k.sum(k.expand_like(k.scalar(1, g), x), axes, true);
  if (ddof != 0) count = k.binary(BinaryOp::Sub, count, k.scalar(ddof, count));
  return k.binary(BinaryOp::Div, g, count);
}

template <class A, class V> V mean_rule(A& k, const V& x, const V& g, const RuleAxes& axes, bool keepdims) {
  return per_count(k, x, sum_rule(k, x, g, axes, keepdims), axes, 0);
}

// amax/amin: the positions equal to the extremum share the gradient evenly (as torch).
template <class A, class V>
V extremum_rule(A& k, const V& x, const V& out, const V& g, const RuleAxes& axes, bool keepdims) {
  const Shape in = k.shape(x);
  V hit = k.cast_like(k.binary(BinaryOp::Eq, x, unreduce(k, out, in, axes, keepdims)), g);
  V count = k.sum(hit, axes, true);
  return k.binary(BinaryOp::Mul, k.binary(BinaryOp::Div, hit, count), unreduce(k, g, in, axes, keepdims));
}

// where(cond, a, b): each side gets g where it was picked.
template <class A, class V>
std::array<V, 2> where_rule(A& k, const V& cond, const V& a, const V& b, const V& g, std::array<bool, 2> need) {
  V zero = k.scalar(0, g), ga = g, gb = g;
  if (need[0]) ga = k.reduce_to(k.where(cond, g, zero), a);
  if (need[1]) gb = k.reduce_to(k.where(cond, zero, g), b);
  return {ga, gb};
}

// concat(xs, axis): each input's slice of g (lengths: the inputs' sizes along axis).
template <class A, class V> std::vector<V> concat_rule(A& k, const V& g, const std::vector<int64_t>& lengths,
                                                       int64_t axis, const std::vector<bool>& need) {
  std::vector<V> out;
  int64_t at = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    out.push_back(need[i] ? k.slice(g, axis, at, at + lengths[i], 1) : g);
    at += lengths[i];
  }
  return out;
}

// ---- composites: one graph node each, their primitives' rules on the eager tape ---------------

// log(sum(exp(x))) over axes: g times softmax(x) over them.
template <class A, class V>
V logsumexp_rule(A& k, const V& x, const V& out, const V& g, const RuleAxes& axes, bool keepdims) {
  const Shape in = k.shape(x);
  V p = k.unary(UnaryOp::Exp, k.binary(BinaryOp::Sub, x, unreduce(k, out, in, axes, keepdims)));
  return k.binary(BinaryOp::Mul, unreduce(k, g, in, axes, keepdims), p);
}

// y = softmax(x) along axis: y * (g - sum(g * y)).
template <class A, class V> V softmax_rule(A& k, const V& y, const V& g, int64_t axis) {
  V dot = k.sum(k.binary(BinaryOp::Mul, g, y), {axis}, true);
  return k.binary(BinaryOp::Mul, y, k.binary(BinaryOp::Sub, g, dot));
}

// y = log_softmax(x) along axis: g - exp(y) * sum(g).
template <class A, class V> V log_softmax_rule(A& k, const V& y, const V& g, int64_t axis) {
  V total = k.sum(g, {axis}, true);
  return k.binary(BinaryOp::Sub, g, k.binary(BinaryOp::Mul, k.unary(UnaryOp::Exp, y), total));
}

// var(x, axes, ddof): 2 (x - mean(x)) g / (n - ddof).
template <class A, class V> V var_rule(A& k, const V& x, const V& g, const RuleAxes& axes, bool keepdims, double ddof) {
  V d = k.binary(BinaryOp::Sub, x, k.mean(x, axes, true));
  V two_d = k.binary(BinaryOp::Mul, d, k.scalar(2, d));
  return per_count(k, x, k.binary(BinaryOp::Mul, two_d, unreduce(k, g, k.shape(x), axes, keepdims)), axes, ddof);
}

// The statistics of a normalization over axes, recomputed from x: x_hat and 1 / sqrt(var + eps).
template <class V> struct Normalized {
  V x_hat, rstd;
};

template <class A, class V> Normalized<V> normalized(A& k, const V& x, const RuleAxes& axes, double eps) {
  V d = k.binary(BinaryOp::Sub, x, k.mean(x, axes, true));
  V var = k.mean(k.binary(BinaryOp::Mul, d, d), axes, true);
  V rstd = k.binary(BinaryOp::Div, k.scalar(1, var),
                    k.unary(UnaryOp::Sqrt, k.binary(BinaryOp::Add, var, k.scalar(eps, var))));
  return {k.binary(BinaryOp::Mul, d, rstd), rstd};
}

// d x of (x - mean) * rstd over axes, from gx = d loss / d x_hat.
template <class A, class V> V normalized_input_grad(A& k, const Normalized<V>& n, const V& gx, const RuleAxes& axes) {
  V mean_gx = k.mean(gx, axes, true);
  V mean_gx_xhat = k.mean(k.binary(BinaryOp::Mul, gx, n.x_hat), axes, true);
  V centred =
      k.binary(BinaryOp::Sub, k.binary(BinaryOp::Sub, gx, mean_gx), k.binary(BinaryOp::Mul, n.x_hat, mean_gx_xhat));
  return k.binary(BinaryOp::Mul, centred, n.rstd);
}

// layer_norm(x, weight, bias) over the trailing axes: {dx, dweight, dbias}. `weight` is read only
// when need[1] or it is present (has_weight).
template <class A, class V> std::array<V, 3> layer_norm_rule(A& k, const V& x, const V& weight, const V& bias,
                                                             bool has_weight, const V& g, const RuleAxes& axes,
                                                             double eps, std::array<bool, 3> need) {
  Normalized<V> n = normalized(k, x, axes, eps);
  std::array<V, 3> out{g, g, g};
  if (need[0])
    out[0] = k.cast_like(normalized_input_grad(k, n, has_weight ? k.binary(BinaryOp::Mul, g, weight) : g, axes), x);
  if (need[1]) out[1] = k.reduce_to(k.binary(BinaryOp::Mul, g, n.x_hat), weight);
  if (need[2]) out[2] = k.reduce_to(g, bias);
  return out;
}

// batch_norm(x, weight, bias) per channel (axis 1): {dx, dweight, dbias}. Training normalizes by
// the batch's statistics (recomputed from x, and differentiated), else by the running ones.
template <class A, class V> std::array<V, 3> batch_norm_rule(A& k, const V& x, const V& weight, const V& bias,
                                                             bool has_weight, const V& running_mean,
                                                             const V& running_var, bool training, const V& g,
                                                             double eps, std::array<bool, 3> need) {
  const Shape s = k.shape(x);
  RuleAxes axes{0};
  for (size_t d = 2; d < s.size(); ++d) axes.push_back(int64_t(d));
  Shape per_channel(s.size(), 1);
  per_channel[1] = s[1];
  Normalized<V> n{g, g};
  if (training) {
    n = normalized(k, x, axes, eps);
  } else {
    V var = k.reshape(running_var, per_channel);
    n.rstd = k.binary(BinaryOp::Div, k.scalar(1, var),
                      k.unary(UnaryOp::Sqrt, k.binary(BinaryOp::Add, var, k.scalar(eps, var))));
    n.x_hat = k.binary(BinaryOp::Mul, k.binary(BinaryOp::Sub, x, k.reshape(running_mean, per_channel)), n.rstd);
  }
  std::array<V, 3> out{g, g, g};
  if (need[0]) {
    V gx = has_weight ? k.binary(BinaryOp::Mul, g, k.reshape(weight, per_channel)) : g;
    out[0] = k.cast_like(training ? normalized_input_grad(k, n, gx, axes) : k.binary(BinaryOp::Mul, gx, n.rstd), x);
  }
  if (need[1]) out[1] = k.cast_like(k.sum(k.binary(BinaryOp::Mul, g, n.x_hat), axes, false), weight);
  if (need[2]) out[2] = k.cast_like(k.sum(g, axes, false), bias);
  return out;
}

// batch_norm_stats(x) = (mean, rstd) per channel, stacked as (1, 2, C, 1, ...), from their
// gradients g (the same shape): d mean / dx = 1 / n and d rstd / dx = -rstd^3 (x - mean) / n (as
// d var / dx = 2 (x - mean) / n), n the values per channel.
template <class A, class V> V batch_norm_stats_rule(A& k, const V& x, const V& stats, const V& g) {
  RuleAxes axes{0};
  for (size_t d = 2; d < k.shape(x).size(); ++d) axes.push_back(int64_t(d));
  const V mean = k.select(stats, 1, 0), rstd = k.select(stats, 1, 1);
  const V rstd3 = k.binary(BinaryOp::Mul, k.binary(BinaryOp::Mul, rstd, rstd), rstd);
  const V per_spread = k.binary(BinaryOp::Mul, k.select(g, 1, 1), rstd3);
  const V centred = k.binary(BinaryOp::Sub, x, mean);
  const V sum = k.binary(BinaryOp::Sub, k.select(g, 1, 0), k.binary(BinaryOp::Mul, per_spread, centred));
  return k.cast_like(per_count(k, x, sum, axes, 0), x);
}

}  // namespace nexus::ops::grad
