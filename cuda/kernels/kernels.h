// The launchers of the device kernels, one per kernel family: the host side of cuda/kernels/*.cu.
// They take plain descriptions (geometry.h) and dtypes, never a Tensor, so the .cu files need no
// core library; CudaBackend (backend.cpp) builds the descriptions. All launch on `stream` and
// return without waiting; a failed launch is a DeviceError.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/reduce_op.h"
#include "geometry.h"
#include "ops/cpu/conv_kernel.h"
#include "ops/cpu/optim_kernel.h"
#include "ops/op_kind.h"
#include "tensor/dtype.h"

namespace nexus::cuda {

// dst[i] = src[i] converted as the CPU's cast_kernel does; operand 0 dst, 1 src.
void launch_cast(DType dst, DType src, const Operands<2>& g, int64_t n, cudaStream_t stream);
// n contiguous elements of `itemsize` bytes (1, 2, 4 or 8), each set to the low bytes of `bits`.
void launch_fill(void* out, int itemsize, uint64_t bits, int64_t n, cudaStream_t stream);
// Operands (out, x) / (out, a, b) / (out, cond, a, b); t the operands' compute dtype.
void launch_unary(ops::UnaryOp op, DType t, const Operands<2>& g, int64_t n, cudaStream_t stream);
void launch_binary(ops::BinaryOp op, DType t, const Operands<3>& g, int64_t n, cudaStream_t stream);
void launch_where(DType t, const Operands<4>& g, int64_t n, cudaStream_t stream);
// Sum/Max/Min of x (dtype x) into out (dtype out: x's, or int64 for integer sums).
void launch_reduce(ReduceOp op, DType x, DType out, const ReduceGeometry& g, cudaStream_t stream);
// out[r] = index of the first maximum of row r of a contiguous (rows, n) x; NaN wins.
void launch_argmax(DType t, int64_t* out, const void* x, int64_t rows, int64_t n, cudaStream_t stream);

// One optimizer update of one parameter segment in place (optim.cu): the host loops' formulas
// (ops/cpu/optim_kernel.cpp) with the same coefficients, in the segment's dtype.
void launch_sgd(const ops::cpu::OptimSegment& s, const ops::cpu::SgdCoeffs& c, cudaStream_t stream);
void launch_adam(const ops::cpu::OptimSegment& s, const ops::cpu::AdamCoeffs& c, cudaStream_t stream);

// conv2d's pieces (conv.cu; the GEMMs are in conv.cpp), float32/float64 t, contiguous NCHW.
// col of `images` images: (images, c*kh*kw, out_h*out_w), im2col of x (images, c, h, w).
void launch_im2col(DType t, const ops::Conv2dGeometry& g, const void* x, int64_t images, void* col,
                   cudaStream_t stream);
// dx (images, c, h, w) = col2im of col (im2col's adjoint, a gather: no atomics, fixed order).
void launch_col2im(DType t, const ops::Conv2dGeometry& g, const void* col, int64_t images, void* dx,
                   cudaStream_t stream);
// y (n, k, pixels) += bias (k) along k.
void launch_add_bias(DType t, void* y, const void* bias, int64_t n, int64_t k, int64_t pixels, cudaStream_t stream);
// dbias (k) = dy (n, k, pixels) summed over n and pixels (0 when n is 0); one block per channel.
void launch_bias_grad(DType t, void* dbias, const void* dy, int64_t n, int64_t k, int64_t pixels, cudaStream_t stream);
// out (size) = (accumulate ? out : 0) + the sum of parts (count, size) in part order.
void launch_sum_parts(DType t, void* out, const void* parts, int64_t count, int64_t size, bool accumulate,
                      cudaStream_t stream);
// 2-D pooling (conv.cu) as ops/cpu/conv_kernel.h; argmax may be null in the forward.
void launch_max_pool2d_forward(DType t, const ops::Pool2dGeometry& g, const void* x, void* y, int64_t* argmax,
                               cudaStream_t stream);
void launch_max_pool2d_backward(DType t, const ops::Pool2dGeometry& g, const void* dy, const int64_t* argmax, void* dx,
                                cudaStream_t stream);
void launch_avg_pool2d_forward(DType t, const ops::Pool2dGeometry& g, const void* x, void* y, cudaStream_t stream);
void launch_avg_pool2d_backward(DType t, const ops::Pool2dGeometry& g, const void* dy, void* dx, cudaStream_t stream);

// DeviceError naming `what` when the last launch failed.
void check_launch(const char* what);

}  // namespace nexus::cuda
