// The CPU kernels the op front ends call, as one table of function pointers per CPU variant
// (base/cpu_variant.h): every file in ops/cpu/ is compiled once per variant and fills its
// entries; kernels() is the active variant's table. Operands already have the output's shape
// (broadcast views), one device and a compute dtype (no halves); the front ends in ops/ arrange
// that.
#pragma once

#include <vector>

#include "base/cpu_variant.h"
#include "base/reduce_op.h"
#include "ops/cpu/conv_kernel.h"
#include "ops/cpu/optim_kernel.h"
#include "ops/op_kind.h"
#include "tensor/tensor.h"

namespace nexus::ops::cpu {

struct Kernels {
  // ---- elementwise (elementwise_kernel.cpp)
  void (*cast)(const Tensor& dst, const Tensor& src);  // any dtypes, same shape
  void (*fill)(const Tensor& out, double value);
  void (*unary)(UnaryOp op, const Tensor& out, const Tensor& x);
  void (*binary)(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);
  void (*where)(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
  // ---- reductions (reduce_kernel.cpp); integer sums into an int64 `out`
  void (*reduce)(ReduceOp op, const Tensor& out, const Tensor& x, const std::vector<int64_t>& axes);
  void (*argmax)(const Tensor& out, const Tensor& x, int64_t rows, int64_t n);  // x: (rows, n) contiguous
  // Per channel of a contiguous float32/float64 x viewed as (N, C, S): mean and biased variance
  // into out, a contiguous float64 (2, C).
  void (*channel_stats)(const Tensor& out, const Tensor& x);
  // ---- NCHW convolution and pooling (conv_kernel.cpp, pool_kernel.cpp; conventions in
  // conv_kernel.h); contiguous
  // float32/float64; an undefined bias, argmax or gradient is skipped
  // forward: then y = relu(y + residual) where given (residual of y's shape; relu optional)
  void (*conv2d_forward)(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                         const Tensor& residual, bool relu);
  void (*conv2d_backward)(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                          const Tensor& dw, const Tensor& dbias);
  void (*max_pool2d_forward)(const Pool2dGeometry& g, const Tensor& x, const Tensor& y, const Tensor& argmax);
  void (*max_pool2d_backward)(const Pool2dGeometry& g, const Tensor& dy, const Tensor& argmax, const Tensor& dx);
  void (*avg_pool2d_forward)(const Pool2dGeometry& g, const Tensor& x, const Tensor& y);
  void (*avg_pool2d_backward)(const Pool2dGeometry& g, const Tensor& dy, const Tensor& dx);
  // ---- softmax and softmax cross-entropy (softmax_xent_kernel.cpp) on contiguous float32/float64 logits x
  // (rows, classes) and int64 labels (rows): nll (rows); stats (2, rows) holds each row's shift
  // (max) and log-sum-exp after it. Backward: dx = (softmax - onehot) * g, g one value per row
  // (per_row) or one for all.
  void (*xent_forward)(const Tensor& x, const Tensor& labels, const Tensor& nll, const Tensor& stats);
  void (*xent_backward)(const Tensor& x, const Tensor& labels, const Tensor& stats, const Tensor& g, bool per_row,
                        const Tensor& dx);
  // y = softmax over the rows of a contiguous float32/float64 x (rows, n), into y of its shape:
  // the composed op's formulas (a max shift, 0 where the max is not finite) in one pass per row.
  void (*softmax_rows)(const Tensor& y, const Tensor& x);
  // y = layer_norm over the rows of n elements of a contiguous float32/float64 x, into y of its
  // shape: the composed op's formulas in one kernel; w and b (n contiguous values of x's dtype)
  // optional.
  void (*layer_norm_rows)(const Tensor& y, const Tensor& x, int64_t n, const Tensor& w, const Tensor& b, double eps);
  // ---- float32 y (m, n) = a (m, k) b (k, n) for a constant b (gemm_kernel.cpp): a and y with
  // contiguous rows, b any strides, its storage marked constant (its packed form is kept there);
  // then y = relu(y + bias) where given (bias: n contiguous values; relu optional)
  void (*matmul_constant)(const Tensor& y, const Tensor& a, const Tensor& b, const Tensor& bias, bool relu);
  // ---- optimizer updates over parameter segments (optim_kernel.cpp)
  void (*sgd)(const std::vector<OptimSegment>& segs, const SgdCoeffs& c);
  void (*adam)(const std::vector<OptimSegment>& segs, const AdamCoeffs& c);
  // Sum of squares of every segment's `grad`, in double, over fixed-size blocks summed in order.
  double (*sum_squares)(const std::vector<OptimSegment>& segs);
  // grad *= scale for every segment (`grad` is written: the caller passes writable gradients).
  void (*scale_grads)(const std::vector<OptimSegment>& segs, double scale);
};

// The active variant's table (ops/dispatch.cpp).
const Kernels& kernels();

// t's elements, or null for an undefined tensor (an optional operand of a kernel entry).
template <class T> T* data_or_null(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }

// Each variant's table (table.cpp); defined for the variants built.
NX_CPU_VARIANT_TABLES(Kernels, kernels_for);

#ifdef NX_CPU_VARIANT
inline namespace NX_CPU_VARIANT {  // inline, as loops.h opens it (base/cpu_variant.h)
// Each kernel file of the variant fills its entries of the table.
void add_elementwise(Kernels& k);
void add_reduce(Kernels& k);
void add_conv(Kernels& k);
void add_pool(Kernels& k);
void add_xent(Kernels& k);
void add_optim(Kernels& k);
void add_gemm(Kernels& k);
}  // namespace NX_CPU_VARIANT
#endif

}  // namespace nexus::ops::cpu
