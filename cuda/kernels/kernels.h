// The launchers of the device kernels, one per kernel family: the host side of cuda/kernels/*.cu.
// They take plain descriptions (geometry.h) and dtypes, never a Tensor, so the .cu files need no
// core library; CudaBackend (backend.cpp) builds the descriptions. All launch on `stream` and
// return without waiting; a failed launch is a DeviceError.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/reduce_op.h"
#include "geometry.h"
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

// DeviceError naming `what` when the last launch failed.
void check_launch(const char* what);

}  // namespace nexus::cuda
