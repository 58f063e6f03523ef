// The elementwise backward rules, written once over an algebra A of values V. Eager tensors
// (derivatives.cpp: A computes) and graph values (graph/passes/autodiff.cpp: A appends IR nodes,
// which the fusion pass then groups) instantiate the same expressions, so the compiled backward
// and the eager tape agree op for op.
//
// A provides: V unary(UnaryOp, V); V binary(BinaryOp, V, V); V scalar(double, V like) (a 0-d
// value in like's dtype); V cast_like(V, V like) (V converted to like's dtype).
// Rules return gradients at the broadcast (output) shape; callers reduce them to each input.
#pragma once

#include <array>

#include "base/error.h"
#include "ops/op_kind.h"

namespace nexus::ops::grad {

// d unary(op, x) / dx applied to g; x and out are what saves(op) says the rule reads.
template <class A, class V>
V unary_rule(A& k, UnaryOp op, const V& x, const V& out, const V& g) {
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
    case U::GeluGrad: case U::Sign: break;
  }
  NX_ASSERT(false, "no derivative for ", op_name(op));
  return g;
}

// d max(a, b): the larger side gets the gradient; ties split it evenly (as torch).
template <class A, class V>
V extremum_share(A& k, BinaryOp cmp, const V& a, const V& b, const V& g) {
  V win = k.cast_like(k.binary(cmp, a, b), g);
  V tie = k.cast_like(k.binary(BinaryOp::Eq, a, b), g);
  return k.binary(BinaryOp::Mul, g, k.binary(BinaryOp::Add, win, k.binary(BinaryOp::Mul, tie, k.scalar(0.5, tie))));
}

// The gradients of binary(op, a, b) for the inputs marked in need (the others are left as g).
template <class A, class V>
std::array<V, 2> binary_rule(A& k, BinaryOp op, const V& a, const V& b, const V& out, const V& g,
                             std::array<bool, 2> need) {
  using B = BinaryOp;
  V ga = g, gb = g;
  switch (op) {
    case B::Add: break;
    case B::Sub: if (need[1]) gb = k.unary(UnaryOp::Neg, g); break;
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
    case B::Maximum: case B::Minimum: {
      const B cmp = op == B::Maximum ? B::Gt : B::Lt;
      if (need[0]) ga = extremum_share(k, cmp, a, b, g);
      if (need[1]) gb = extremum_share(k, cmp, b, a, g);
      break;
    }
    default: NX_ASSERT(false, "no derivative for ", op_name(op));
  }
  return {ga, gb};
}

}  // namespace nexus::ops::grad
