// GEMM goes to BLAS (OpenBLAS from the scipy-openblas32 wheel). Row-major, C = alpha*op(A)*op(B) + beta*C.
#pragma once

#include <cstdint>

namespace nexus::ops {

template <class T> void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                             int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

const char* blas_name();  // e.g. "OpenBLAS 0.3.x (scipy-openblas32)"
// The kernels OpenBLAS chose for this CPU at load ("SkylakeX", "Haswell"; OPENBLAS_CORETYPE forces them).
const char* blas_core();
// OpenBLAS always runs one thread per call; gemm() splits large products over the Nexus pool.
void blas_set_num_threads(int n);
// Puts OpenBLAS back at one thread per call where something outside Nexus raised it (threadpoolctl's
// limits reach every OpenBLAS in the process, ours too): pool tasks that each called a two-thread
// OpenBLAS ran 4 threads on 2 cores, a transformer at half speed with 13 ms stalls. The count is
// global, so parallel_for runs this before its tasks start, and gemm() on the calling thread.
void blas_single_threaded();

}  // namespace nexus::ops
