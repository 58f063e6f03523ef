// The BLAS boundary: OpenBLAS from the scipy-openblas32 wheel (symbols prefixed scipy_).
#include "ops/blas.h"

#include <cblas.h>

#include "nexus/config.h"

namespace nexus::ops {

static CBLAS_TRANSPOSE tr(bool t) { return t ? CblasTrans : CblasNoTrans; }

template <>
void gemm<float>(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  scipy_cblas_sgemm(CblasRowMajor, tr(ta), tr(tb), blasint(m), blasint(n), blasint(k), alpha, a,
                    blasint(lda), b, blasint(ldb), beta, c, blasint(ldc));
}

template <>
void gemm<double>(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                  int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  scipy_cblas_dgemm(CblasRowMajor, tr(ta), tr(tb), blasint(m), blasint(n), blasint(k), alpha, a,
                    blasint(lda), b, blasint(ldb), beta, c, blasint(ldc));
}

const char* blas_name() { return NEXUS_BLAS_NAME; }

void blas_set_num_threads(int n) { scipy_openblas_set_num_threads(n); }

}  // namespace nexus::ops
