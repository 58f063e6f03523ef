// The BLAS boundary: OpenBLAS from the scipy-openblas32 wheel (symbols prefixed scipy_).
#include "ops/blas.h"

#include <cblas.h>

#include "base/thread_pool.h"
#include "nexus/config.h"

namespace nexus::ops {

static CBLAS_TRANSPOSE tr(bool t) { return t ? CblasTrans : CblasNoTrans; }

// OpenBLAS runs single-threaded; large products are split into row (or column) blocks over the
// one Nexus pool. Small products stay on the calling thread: splitting a few microseconds of work
// costs more in hand-offs than it saves (and OpenBLAS's own spinning workers, on a busy machine,
// cost a whole scheduler slice). One pool for kernels and GEMM: never oversubscribed.
static constexpr int64_t kThreadedGemmFlops = int64_t(1) << 22;
// A product of few rows reading a large operand (a GEMV over a layer's weights at batch 1) is
// bound by memory, not FLOPs: from this many bytes read (past the caches), two cores' bandwidth
// beats one. Below it, a GEMV (see product()) is a few microseconds on one core, and handing half
// to a worker cost more at the median and several times the time at p99 (MLP 784-256-10).
static constexpr int64_t kThreadedGemmBytes = int64_t(1) << 22;
// From ~0.1 GFLOP on, OpenBLAS's own threading wins (its threads share one packed panel instead of
// each block packing its own); its workers' hand-off is small next to the product.
static constexpr int64_t kBlasThreadedGemmFlops = int64_t(1) << 27;

namespace {
// Lends OpenBLAS the pool's thread count for one large product on the calling thread.
class BlasThreads {
 public:
  explicit BlasThreads(int n) : n_(n) {
    if (n_ > 1) scipy_openblas_set_num_threads(n_);
  }
  ~BlasThreads() {
    if (n_ > 1) scipy_openblas_set_num_threads(1);
  }
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;

 private:
  int n_;
};
}  // namespace

template <class T, class Call> static void blocked(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a,
                                                   int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc, Call call) {
  if (!in_parallel_region()) blas_single_threaded();
  int threads = num_threads();
  const int64_t flops = 2 * m * n * k, bytes = (m * k + k * n) * int64_t(sizeof(T));
  if (threads == 1 || (flops < kThreadedGemmFlops && bytes < kThreadedGemmBytes) || in_parallel_region()) {
    call(m, n, a, b, c);
    return;
  }
  if (flops >= kBlasThreadedGemmFlops) {
    BlasThreads lend(threads);
    call(m, n, a, b, c);
    return;
  }
  if (m >= n) {  // blocks of rows of C = rows of op(A)
    parallel_for(m, (m + threads - 1) / threads,
                 [&](int64_t r0, int64_t r1) { call(r1 - r0, n, ta ? a + r0 : a + r0 * lda, b, c + r0 * ldc); });
  } else {  // blocks of columns of C = columns of op(B)
    parallel_for(n, (n + threads - 1) / threads,
                 [&](int64_t c0, int64_t c1) { call(m, c1 - c0, a, tb ? b + c0 * ldb : b + c0, c + c0); });
  }
}

// One block of C = alpha op(A) op(B) + beta C. A block of one row (or one column) is a
// matrix-vector product: ?gemv reads the matrix once as it is, where ?gemm would first pack it
// (at batch 1, packing a layer's weights cost several times the product itself).
template <class T, class Gemm, class Gemv> static void product(Gemm gemm_fn, Gemv gemv_fn, bool ta, bool tb, int64_t m,
                                                               int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                                                               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 1 && k > 0) {  // row of C = a op(B): op(B) is k x n
    const int64_t inc_a = ta ? lda : 1;
    if (tb)
      gemv_fn(CblasRowMajor, CblasNoTrans, blasint(n), blasint(k), alpha, b, blasint(ldb), a, blasint(inc_a), beta, c,
              1);
    else
      gemv_fn(CblasRowMajor, CblasTrans, blasint(k), blasint(n), alpha, b, blasint(ldb), a, blasint(inc_a), beta, c, 1);
    return;
  }
  if (n == 1 && k > 0) {  // column of C = op(A) b: op(A) is m x k
    const int64_t inc_b = tb ? 1 : ldb;
    if (ta)
      gemv_fn(CblasRowMajor, CblasTrans, blasint(k), blasint(m), alpha, a, blasint(lda), b, blasint(inc_b), beta, c,
              blasint(ldc));
    else
      gemv_fn(CblasRowMajor, CblasNoTrans, blasint(m), blasint(k), alpha, a, blasint(lda), b, blasint(inc_b), beta, c,
              blasint(ldc));
    return;
  }
  gemm_fn(CblasRowMajor, tr(ta), tr(tb), blasint(m), blasint(n), blasint(k), alpha, a, blasint(lda), b, blasint(ldb),
          beta, c, blasint(ldc));
}

template <> void gemm<float>(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                             int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  blocked<float>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc,
                 [&](int64_t mm, int64_t nn, const float* pa, const float* pb, float* pc) {
                   product<float>(scipy_cblas_sgemm, scipy_cblas_sgemv, ta, tb, mm, nn, k, alpha, pa, lda, pb, ldb,
                                  beta, pc, ldc);
                 });
}

template <> void gemm<double>(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                              int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  blocked<double>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc,
                  [&](int64_t mm, int64_t nn, const double* pa, const double* pb, double* pc) {
                    product<double>(scipy_cblas_dgemm, scipy_cblas_dgemv, ta, tb, mm, nn, k, alpha, pa, lda, pb, ldb,
                                    beta, pc, ldc);
                  });
}

const char* blas_name() { return NEXUS_BLAS_NAME; }

const char* blas_core() { return scipy_openblas_get_corename(); }

void blas_set_num_threads(int) { scipy_openblas_set_num_threads(1); }  // the pool splits instead

void blas_single_threaded() {
  if (scipy_openblas_get_num_threads() != 1) scipy_openblas_set_num_threads(1);
}

}  // namespace nexus::ops
