// Backward rules: ONE table (derivatives.cpp) for every differentiable op. Each function takes
// what the forward saved and returns the BackwardFn recorded on the output.
#pragma once

#include "ops/cpu/conv_kernel.h"
#include "ops/ops.h"
#include "tensor/tape.h"

namespace nexus::ops::grad {

using autograd::BackwardFn;

// What a rule keeps from the forward pass (its inputs a, b and its output): the graph autodiff
// keeps exactly these alive until the backward node runs, and the rules capture nothing more.
struct Saves {
  bool a, b, out;
};
Saves saves(UnaryOp op);
Saves saves(BinaryOp op);

BackwardFn unary(UnaryOp op, const Tensor& x, const Tensor& out);
BackwardFn binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
BackwardFn where(const Tensor& cond, const Tensor& a, const Tensor& b);
BackwardFn astype(DType from);
BackwardFn reshape(const Shape& in_shape);
BackwardFn permute(const std::vector<int64_t>& dims);
BackwardFn expand(const Shape& in_shape);
BackwardFn slice(const Shape& in_shape, int64_t axis, int64_t start, int64_t step);
BackwardFn index_select(const Shape& in_shape, const Tensor& index);
BackwardFn concat(const std::vector<Shape>& shapes, int64_t axis);
BackwardFn sum(const Shape& in_shape, const Axes& axes, bool keepdims);
BackwardFn extremum(const Tensor& x, const Tensor& out, const Axes& axes, bool keepdims);
BackwardFn matmul(const Tensor& a, const Tensor& b);
BackwardFn conv2d(const Tensor& x, const Tensor& w, const Conv2dGeometry& g);
BackwardFn max_pool2d(const Tensor& argmax, const Pool2dGeometry& g);
BackwardFn avg_pool2d(const Pool2dGeometry& g);
// x: the logits in their compute dtype, contiguous; stats: (2, rows), each row's shift and
// log-sum of the shifted exponentials (cpu::xent_forward).
BackwardFn cross_entropy(const Tensor& x, const Tensor& labels, const Tensor& stats, ReduceOp reduction,
                         DType logits_dtype);

// Reduces a gradient computed at a broadcast shape back to `like`'s shape and dtype.
Tensor reduce_to(const Tensor& g, const Tensor& like);

}  // namespace nexus::ops::grad
