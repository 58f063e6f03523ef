// cuBLAS, loaded at run time (cublas.cpp): no cuBLAS headers or link-time dependency, so the
// backend imports where cuBLAS is not installed and only matmul says what to install.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace nexus::cuda {

// One column-major operand of a strided-batched GEMM: transposed or not, leading dimension and
// the element distance between consecutive batches (0: the same matrix for every batch).
struct GemmOperand {
  const void* ptr;
  bool trans;
  int64_t ld;
  int64_t batch_stride;
};

// C[b] = op(A[b]) op(B[b]) in cuBLAS's column-major terms: C is m x n (leading dimension ldc,
// batches stride_c apart), op(A) m x k, op(B) k x n; float32, float64, float16 or bfloat16 (these
// two on tensor cores, accumulated in float32), on the current device
// and `stream`. DeviceError when cuBLAS cannot be loaded ("pip install nvidia-cublas") or fails.
// Whether float32 GEMMs may round their inputs to TF32 on tensor cores (torch's
// backends.cuda.matmul.allow_tf32); off unless NEXUS_CUDA_TF32 says otherwise.
bool allow_tf32();
void set_allow_tf32(bool on);

void gemm_strided_batched(DType t, int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b, void* c,
                          int64_t ldc, int64_t stride_c, int64_t batch, cudaStream_t stream);

}  // namespace nexus::cuda
