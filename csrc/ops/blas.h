// GEMM goes to BLAS (OpenBLAS from the scipy-openblas32 wheel). Row-major, C = alpha*op(A)*op(B) + beta*C.
#pragma once

#include <cstdint>

namespace nexus::ops {

template <class T> void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                             int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

const char* blas_name();  // e.g. "OpenBLAS 0.3.x (scipy-openblas32)"
// OpenBLAS always runs one thread per call; gemm() splits large products over the Nexus pool.
void blas_set_num_threads(int n);

}  // namespace nexus::ops
