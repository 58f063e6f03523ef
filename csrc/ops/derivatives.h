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

// The gradient kernels behind the rules above. The overloads taking the forward's inputs and
// node attributes serve the graph's backward nodes (engine/executor.cpp); they recompute what
// the eager op kept (max_pool2d's argmax, cross_entropy's statistics).
std::vector<Tensor> conv2d_grad(const Tensor& gy, const Tensor& x, const Tensor& w, const Conv2dGeometry& g,
                                const std::vector<bool>& need);
// ints: the Conv2d node's stride_h, stride_w, pad_h, pad_w, groups
std::vector<Tensor> conv2d_grad(const Tensor& gy, const Tensor& x, const Tensor& w, const std::vector<int64_t>& ints,
                                const std::vector<bool>& need);
Tensor max_pool2d_grad(const Tensor& gy, const Tensor& argmax, const Pool2dGeometry& g);
Tensor max_pool2d_grad(const Tensor& gy, const Tensor& x, const std::vector<int64_t>& window);  // kh, kw, sh, sw
Tensor avg_pool2d_grad(const Tensor& gy, const Pool2dGeometry& g);
// window_and_size: kh, kw, sh, sw, then the input's height and width
Tensor avg_pool2d_grad(const Tensor& gy, const std::vector<int64_t>& window_and_size);
Tensor cross_entropy_grad(const Tensor& gy, const Tensor& x, const Tensor& labels, const Tensor& stats,
                          ReduceOp reduction, DType logits_dtype);
Tensor cross_entropy_grad(const Tensor& gy, const Tensor& logits, const Tensor& labels, ReduceOp reduction);

// Reduces a gradient computed at a broadcast shape back to `like`'s shape and dtype.
Tensor reduce_to(const Tensor& g, const Tensor& like);
// Zeros of in_shape with g written at slice(axis, start, stop, step) (slice's arguments as given
// to the forward op: they are normalized the same way).
Tensor slice_grad(const Tensor& g, const Shape& in_shape, int64_t axis, int64_t start, int64_t stop, int64_t step);
// Zeros of in_shape with g's rows added at `index` along axis 0 (index_select's gradient).
Tensor index_select_grad(const Tensor& g, const Tensor& index, const Shape& in_shape);

}  // namespace nexus::ops::grad
