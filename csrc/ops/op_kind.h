// The elementwise op vocabulary, shared by the eager kernels and (later) the graph IR and codegen.
#pragma once

#include <cstdint>
#include <string_view>

namespace nexus::ops {

enum class UnaryOp : uint8_t {
  Neg, Exp, Log, Sqrt, Tanh, Sigmoid, Relu, Gelu, Sin, Cos, Abs,
  // used by backward rules
  GeluGrad, Sign,
};

enum class BinaryOp : uint8_t {
  Add, Sub, Mul, Div, Pow, Maximum, Minimum,
  Eq, Ne, Lt, Le, Gt, Ge,
  FloorDiv,   // Python's //: the quotient rounded toward -inf (numpy.floor_divide)
  Remainder,  // Python's %: a - floor_divide(a, b) * b, with the divisor's sign (numpy.remainder)
  // used by backward rules (one pass instead of a mask, a cast and a multiply)
  ReluGrad,     // (g, out): out <= 0 ? 0 : g  (out = relu(x) > 0 exactly where x > 0)
  TanhGrad,     // (g, out): g * (1 - out^2)
  SigmoidGrad,  // (g, out): g * out * (1 - out)
};

std::string_view op_name(UnaryOp op);
std::string_view op_name(BinaryOp op);
constexpr bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq && op <= BinaryOp::Ge; }
constexpr bool is_backward_only(BinaryOp op) { return op >= BinaryOp::ReluGrad; }

}  // namespace nexus::ops
