// The elementwise op table: one row per op, the only place an op is listed. The enums and
// op_name (op_kind.h), the front ends' dtype rules (ops/elementwise.cpp), the eager kernels
// (ops/cpu/elementwise_kernel.cpp), the CUDA backend's kernels (cuda/kernels), the interpreter
// (codegen/interp.cpp), both renderer dialects (codegen/render.cpp) and the Python enums
// (src/bind_ops.cpp) are all generated from it, and all of them compute an op with the one kern::
// function its row names.
//
// Adding an op: its row here, its kern:: function (codegen/kernel_ops.h when one definition
// serves host and device; a transcendental goes to kernel_prelude.h and, for the device, to the
// CUDA prelude codegen/kernel_prelude_cuda.h), and its derivative rule (ops/derivative_rules.h, with
// what it saves in ops/derivatives.cpp). tests/python/test_op_table.py then checks the new row
// in eager, the interpreter and a compiled kernel; a public op also wants its nx.<name> line in
// python/nexus/functional.py (the same test lists any that is missing).
//
// Columns: X(Enum, kern_fn, "name", domain, result, role)
//   kern_fn  the scalar function in nexus::kern (overloaded or templated on the register type)
//   name     op_name(): the Python enum value, kernel names and error messages
//   domain   Any: every dtype, bool too; Numeric: every dtype but bool; Float: floating dtypes,
//            and integer operands compute in float32 (exp(int), int / int give float32)
//   result   Same: the operands' dtype; Bool: a comparison
//   role     Public: an nx function, recorded on the tape; Backward: used by derivative rules
//            only (no gradient of its own, not recorded)
#pragma once

// clang-format off
#define NX_UNARY_OPS(X)                                        \
  X(Neg,      neg,       "neg",       Numeric, Same, Public)   \
  X(Exp,      exp_,      "exp",       Float,   Same, Public)   \
  X(Log,      log_,      "log",       Float,   Same, Public)   \
  X(Sqrt,     sqrt_,     "sqrt",      Float,   Same, Public)   \
  X(Tanh,     tanh_,     "tanh",      Float,   Same, Public)   \
  X(Sigmoid,  sigmoid,   "sigmoid",   Float,   Same, Public)   \
  X(Relu,     relu,      "relu",      Numeric, Same, Public)   \
  X(Gelu,     gelu,      "gelu",      Float,   Same, Public)   \
  X(Sin,      sin_,      "sin",       Float,   Same, Public)   \
  X(Cos,      cos_,      "cos",       Float,   Same, Public)   \
  X(Abs,      abs_,      "abs",       Numeric, Same, Public)   \
  X(Erf,      erf_,      "erf",       Float,   Same, Public)   \
  X(GeluGrad, gelu_grad, "gelu_grad", Float,   Same, Backward) \
  X(Sign,     sign,      "sign",      Numeric, Same, Backward)

#define NX_BINARY_OPS(X)                                                                  \
  X(Add,         add,          "add",          Any,     Same, Public)                     \
  X(Sub,         sub,          "sub",          Numeric, Same, Public)                     \
  X(Mul,         mul,          "mul",          Any,     Same, Public)                     \
  X(Div,         div,          "div",          Float,   Same, Public)                     \
  X(Pow,         pow_,         "pow",          Numeric, Same, Public)                     \
  X(Maximum,     maximum,      "maximum",      Any,     Same, Public)                     \
  X(Minimum,     minimum,      "minimum",      Any,     Same, Public)                     \
  X(Eq,          eq,           "eq",           Any,     Bool, Public)                     \
  X(Ne,          ne,           "ne",           Any,     Bool, Public)                     \
  X(Lt,          lt,           "lt",           Any,     Bool, Public)                     \
  X(Le,          le,           "le",           Any,     Bool, Public)                     \
  X(Gt,          gt,           "gt",           Any,     Bool, Public)                     \
  X(Ge,          ge,           "ge",           Any,     Bool, Public)                     \
  /* Python's //: the quotient rounded toward -inf (numpy.floor_divide) */                \
  X(FloorDiv,    floor_divide, "floor_divide", Numeric, Same, Public)                     \
  /* Python's %: a - floor_divide(a, b) * b, with the divisor's sign (numpy.remainder) */ \
  X(Remainder,   remainder_,   "remainder",    Numeric, Same, Public)                     \
  /* (g, out) of the forward op: one pass instead of a mask, a cast and a multiply */     \
  X(ReluGrad,    relu_grad,    "relu_grad",    Float,   Same, Backward)                   \
  X(TanhGrad,    tanh_grad,    "tanh_grad",    Float,   Same, Backward)                   \
  X(SigmoidGrad, sigmoid_grad, "sigmoid_grad", Float,   Same, Backward)
// clang-format on
