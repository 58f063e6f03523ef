// Op front ends: the core's public API. Each checks its arguments (errors name the op, the shapes
// and what would be valid), runs the kernel and records the backward rule from derivatives.cpp.
#pragma once

#include <optional>
#include <vector>

#include "base/reduce_op.h"
#include "ops/op_kind.h"
#include "tensor/tensor.h"

namespace nexus::ops {

using Axes = std::vector<int64_t>;  // empty = all axes (for reductions)

// ---- creation / conversion ----
Tensor full(const Shape& shape, double value, DType dtype, Device device = Device::cpu());
Tensor arange(double start, double stop, double step, DType dtype);
void manual_seed(uint64_t seed);
Tensor rand(const Shape& shape, DType dtype);
Tensor randn(const Shape& shape, DType dtype);
Tensor astype(const Tensor& x, DType dtype);
// x on `device` (x itself when it is there already); the gradient goes back to x's device.
// non_blocking: a copy from pinned host memory to a device may return before it is done (later
// work on the device's current stream is ordered after it); every other copy returns when done.
Tensor to_device(const Tensor& x, Device device, bool non_blocking = false);
Tensor contiguous(const Tensor& x, bool force_copy = false);
void copy_(const Tensor& dst, const Tensor& src);  // dst is a (possibly strided) view; broadcasts src

// ---- views ----
Tensor reshape(const Tensor& x, Shape shape);  // one -1 allowed
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& x, int64_t a, int64_t b);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t stop, int64_t step);
Tensor select(const Tensor& x, int64_t axis, int64_t index);
Tensor unsqueeze(const Tensor& x, int64_t axis);
Tensor index_select(const Tensor& x, const Tensor& index);                     // gather along axis 0
Tensor index_add(const Tensor& base, const Tensor& index, const Tensor& src);  // no grad
// dst[index[i]] = src[i] along axis 0, in place (src broadcasts to dst[index]'s shape; a repeated
// index keeps the last write); records nothing
void index_copy_(const Tensor& dst, const Tensor& index, const Tensor& src);
Tensor sum_to(const Tensor& x, const Shape& shape);  // reverse of broadcasting
Tensor concat(const std::vector<Tensor>& xs, int64_t axis);
Tensor stack(const std::vector<Tensor>& xs, int64_t axis);

// ---- elementwise ----
Tensor unary(UnaryOp op, const Tensor& x);
// Result dtypes, shared by the eager ops, the fused-kernel lowering and graph autodiff.
DType unary_result_dtype(UnaryOp op, DType x);             // transcendentals of integers give float32
DType binary_common_dtype(BinaryOp op, DType a, DType b);  // both operands convert to it
DType binary_result_dtype(BinaryOp op, DType a, DType b);  // bool for comparisons
// binary(op, a, b)'s shape, after the checks binary makes on shapes and dtypes (not on values)
Shape binary_shape(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
inline Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Add, a, b); }
inline Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Sub, a, b); }
inline Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Mul, a, b); }
inline Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Div, a, b); }
Tensor scalar_like(double value, const Tensor& like);  // 0-d tensor in like's (compute) dtype
Tensor mul_scalar(const Tensor& a, double s);
Tensor add_scalar(const Tensor& a, double s);

// ---- reductions ----
// op: one of kReductions (the same as sum, mean, amax, amin).
Tensor reduce(ReduceOp op, const Tensor& x, const Axes& axes, bool keepdims);
Tensor sum(const Tensor& x, const Axes& axes, bool keepdims);
Tensor mean(const Tensor& x, const Axes& axes, bool keepdims);
Tensor amax(const Tensor& x, const Axes& axes, bool keepdims);
Tensor amin(const Tensor& x, const Axes& axes, bool keepdims);
Tensor argmax(const Tensor& x, std::optional<int64_t> axis, bool keepdims);
Tensor var(const Tensor& x, const Axes& axes, bool keepdims, int64_t ddof);
Tensor logsumexp(const Tensor& x, const Axes& axes, bool keepdims);
Tensor softmax(const Tensor& x, int64_t axis);
Tensor log_softmax(const Tensor& x, int64_t axis);

// ---- linear algebra and nn ----
Tensor matmul(const Tensor& a, const Tensor& b);
// relu(a @ b + bias) (a (..., k), b (k, n), bias of n values or none; relu optional) in one op:
// an inference graph's Gemm bias and activation folded into the product (graph::fold_epilogues),
// applied to the sums in registers where b is constant. No backward: ValueError where one would be
// recorded.
Tensor matmul_epilogue(const Tensor& a, const Tensor& b, const Tensor& bias, bool relu);
// The reductions a loss takes, as torch's reduction='none' | 'mean' | 'sum'.
inline constexpr ReduceOp kLossReductions[] = {ReduceOp::None, ReduceOp::Mean, ReduceOp::Sum};
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, ReduceOp reduction);
// groups: channels split into independent convolutions (the weight is (K, C / groups, KH, KW))
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride_h, int64_t stride_w, int64_t pad_h,
              int64_t pad_w, int64_t groups = 1);
// relu(conv2d(...) + residual) (residual of the output's shape, or none; relu optional) in one pass
// over the output: an inference graph's Add and ReLU folded into the convolution before them
// (graph::fold_epilogues). No backward: ValueError where one would be recorded.
Tensor conv2d_epilogue(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride_h, int64_t stride_w,
                       int64_t pad_h, int64_t pad_w, int64_t groups, const Tensor& residual, bool relu);
Tensor max_pool2d(const Tensor& x, int64_t kh, int64_t kw, int64_t sh, int64_t sw);
Tensor avg_pool2d(const Tensor& x, int64_t kh, int64_t kw, int64_t sh, int64_t sw);
Tensor dropout(const Tensor& x, double p, bool training);
// dropout's multiplier for x in training: 0 where dropped, 1 / (1 - p) where kept (x's shape);
// draws random numbers only for 0 < p < 1, as dropout
Tensor dropout_mask(const Tensor& x, double p);
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias, double eps);
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps);
// batch_norm's statistics per channel (axis 1) of x (N, C, ...): mean and 1 / sqrt(var + eps),
// stacked as (1, 2, C, 1, ...) in x's dtype so that each row (axis 1) broadcasts against x. Training: the
// batch's (biased variance, one pass over x on the host), and the running stats (when given)
// move by `momentum` towards them (the unbiased variance, as PyTorch); else the running ones. It
// records no gradient: compiled graphs differentiate it by their own rule (derivative_rules.h).
Tensor batch_norm_stats(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, bool training,
                        double momentum, double eps);

}  // namespace nexus::ops
