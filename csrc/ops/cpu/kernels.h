// CPU kernels for the elementwise family. Operands already have the output's shape (broadcast
// views) and a compute dtype (no halves); the front ends in ops/ arrange that.
#pragma once

#include "ops/op_kind.h"
#include "tensor/tensor.h"

namespace nexus::ops::cpu {

void cast_kernel(const Tensor& dst, const Tensor& src);  // any dtypes, same shape
void fill_kernel(const Tensor& out, double value);
void unary_kernel(UnaryOp op, const Tensor& out, const Tensor& x);
void binary_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);
void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);

}  // namespace nexus::ops::cpu
