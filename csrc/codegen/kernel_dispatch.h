// From an op to its kern:: function, for code that loops over registers of a type T: the eager
// kernels (ops/cpu/elementwise_kernel.cpp) and the interpreter (interp.cpp). Both switches are
// generated from the op table, so an op computes with the same function on every path (the
// renderer writes the same function's name into the generated source).
#pragma once

#include <type_traits>

#include "base/error.h"
#include "codegen/kernel_prelude.h"
#include "ops/op_kind.h"

namespace nexus::kern {
#ifdef NX_CPU_VARIANT
inline namespace NX_CPU_VARIANT {  // a CPU variant's own copy (base/cpu_variant.h)
#endif

// Whether registers of type T (float, double, int32_t, int64_t, bool) can hold an op's operands:
// the dtypes its front end converts operands to (op_table.h's domain column).
template <class T> constexpr bool computes_in(ops::OpDomain d) {
  constexpr DType t = DTypeOf<T>::value;
  return ops::accepts(d, t) && ops::operand_dtype(d, t) == t;
}

// Calls body(f) with f(T) -> T the op's kern:: function, a lambda the compiler inlines into
// body's loop. An op whose domain excludes T is a front end's bug: InternalError.
template <class T, class Body> void with_unary(ops::UnaryOp op, Body&& body) {
  switch (op) {
#define NX_CASE(Enum, fn, name, domain, result, role)                                            \
  case ops::UnaryOp::Enum:                                                                       \
    if constexpr (computes_in<T>(ops::OpDomain::domain)) return body([](T v) { return fn(v); }); \
    break;
    NX_UNARY_OPS(NX_CASE)
#undef NX_CASE
  }
  NX_ASSERT(false, ops::op_name(op), " reached a kernel with ", dtype_name(DTypeOf<T>::value), " operands");
}

// Calls body(f) with f(T, T) -> T, or -> bool for a comparison, the op's kern:: function.
template <class T, class Body> void with_binary(ops::BinaryOp op, Body&& body) {
  switch (op) {
#define NX_CASE(Enum, fn, name, domain, result, role)                                                    \
  case ops::BinaryOp::Enum:                                                                              \
    if constexpr (computes_in<T>(ops::OpDomain::domain)) return body([](T x, T y) { return fn(x, y); }); \
    break;
    NX_BINARY_OPS(NX_CASE)
#undef NX_CASE
  }
  NX_ASSERT(false, ops::op_name(op), " reached a kernel with ", dtype_name(DTypeOf<T>::value), " operands");
}

#ifdef NX_CPU_VARIANT
}  // namespace NX_CPU_VARIANT
#endif
}  // namespace nexus::kern
