// float32 products with a constant right-hand side: an inference model's weights, y = a b with b
// fixed for the model's life. b is packed once into panels of NR columns (two of the variant's
// vectors), each panel k rows of NR contiguous floats, zero past n, and kept beside b's storage
// (Storage::derived). A micro-kernel holds MR x NR sums in registers over the whole of k: per
// step, two vector loads of the panel and MR broadcasts of a feed 2*MR fused multiply-adds (this
// file is built with contraction on, CMakeLists.txt). OpenBLAS packs b on every call, which at
// batch 1 costs more than the product, and its kernels are the ones the environment selects.
//
// Every sum runs over k in order with one accumulator: the result is the same on every call,
// split and thread count. Threads take contiguous runs of rows (where there are enough) or of
// panels (across calls each core then keeps reading the same part of b from its own cache); see
// product().
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "base/thread_pool.h"
#include "ops/cpu/kernels.h"

// GCC vectors wider than the baseline's registers; their ABI differs between variants, which is
// moot for functions local to this file.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace nexus::ops::cpu::NX_CPU_VARIANT {
namespace {

// The vector width and rows per micro-kernel: MR x 2 accumulators, two panel vectors and one
// broadcast within the variant's registers (32 with AVX-512 and on aarch64, 16 otherwise).
#if defined(__AVX512F__)
constexpr int64_t kVecBytes = 64, MR = 8;
#elif defined(__AVX__)
constexpr int64_t kVecBytes = 32, MR = 6;
#elif defined(__aarch64__)
constexpr int64_t kVecBytes = 16, MR = 8;
#else
constexpr int64_t kVecBytes = 16, MR = 6;
#endif

typedef float V __attribute__((vector_size(kVecBytes)));  // (a `using` would drop the attribute)
constexpr int64_t L = kVecBytes / int64_t(sizeof(float)), NR = 2 * L;

V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

void pack(const float* b, int64_t k, int64_t n, int64_t sk, int64_t sn, float* panels) {
  const int64_t count = (n + NR - 1) / NR;
  parallel_for(count, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, k * NR)),
               [=](int64_t p0, int64_t p1) {
                 for (int64_t p = p0; p < p1; ++p) {
                   float* panel = panels + p * k * NR;
                   const int64_t j0 = p * NR, cols = std::min(NR, n - j0);
                   for (int64_t r = 0; r < k; ++r) {
                     float* dst = panel + r * NR;
                     const float* src = b + r * sk + j0 * sn;
                     for (int64_t j = 0; j < cols; ++j) dst[j] = src[j * sn];
                     std::fill(dst + cols, dst + NR, 0.0f);
                   }
                 }
               });
}

// The epilogue of an inference graph's Gemm: y = relu(y + bias), bias padded to whole panels (or
// null), applied to the sums' vectors before they are stored; the ops' own expressions, so the
// result has their bits.
struct Epilogue {
  const float* bias = nullptr;
  bool relu = false;
};

// y rows [0, RM) x the columns of PN panels from panel p on = a's RM rows times those panels.
// Few rows take several panels at once: their sums are independent chains of fused
// multiply-adds, where one panel's two would wait on each other's latency (a batch-1 product).
template <int64_t RM, int64_t PN> void micro(const float* a, int64_t lda, const float* panels, int64_t p, int64_t k,
                                             int64_t n, float* y, int64_t ldy, const Epilogue& ep) {
  const float* panel = panels + p * k * NR;
  V acc[RM][2 * PN] = {};
  for (int64_t q = 0; q < k; ++q) {
    V b[2 * PN];
#pragma GCC unroll 8
    for (int64_t i = 0; i < PN; ++i) {
      b[2 * i] = load(panel + (i * k + q) * NR);
      b[2 * i + 1] = load(panel + (i * k + q) * NR + L);
    }
#pragma GCC unroll 8
    for (int64_t r = 0; r < RM; ++r) {
      const float x = a[r * lda + q];
#pragma GCC unroll 8
      for (int64_t v = 0; v < 2 * PN; ++v) acc[r][v] += x * b[v];
    }
  }
  if (ep.bias != nullptr)
    for (int64_t v = 0; v < 2 * PN; ++v) {
      const V b = load(ep.bias + p * NR + v * L);
      for (int64_t r = 0; r < RM; ++r) acc[r][v] = acc[r][v] + b;
    }
  if (ep.relu)  // relu keeps NaN, as the op: v > 0 ? v : (v != v ? v : 0)
    for (int64_t r = 0; r < RM; ++r)
      for (int64_t v = 0; v < 2 * PN; ++v)
        acc[r][v] = acc[r][v] > 0 ? acc[r][v] : (acc[r][v] != acc[r][v] ? acc[r][v] : 0);
  for (int64_t i = 0; i < PN; ++i) {
    const int64_t j0 = (p + i) * NR, cols = std::min(NR, n - j0);
    for (int64_t r = 0; r < RM; ++r) {
      float row[NR];
      std::memcpy(row, &acc[r][2 * i], sizeof(row));
      std::memcpy(y + r * ldy + j0, row, size_t(cols) * sizeof(float));
    }
  }
}

// Panels [p0, p1) for rows [0, RM) of a and y: PN at a time, then one at a time.
template <int64_t RM> void row_block(const float* a, int64_t lda, const float* panels, int64_t p0, int64_t p1,
                                     int64_t k, int64_t n, float* y, const Epilogue& ep) {
  constexpr int64_t PN = RM <= 2 ? 4 : RM <= 4 ? 2 : 1;
  int64_t p = p0;
  for (; p + PN <= p1; p += PN) micro<RM, PN>(a, lda, panels, p, k, n, y, n, ep);
  for (; p < p1; ++p) micro<RM, 1>(a, lda, panels, p, k, n, y, n, ep);
}

// The last rows of a, fewer than MR: the row block of exactly that many.
template <int64_t RM> void row_tail(int64_t rows, const float* a, int64_t lda, const float* panels, int64_t p0,
                                    int64_t p1, int64_t k, int64_t n, float* y, const Epilogue& ep) {
  if constexpr (RM > 0) {
    if (rows == RM) return row_block<RM>(a, lda, panels, p0, p1, k, n, y, ep);
    row_tail<RM - 1>(rows, a, lda, panels, p0, p1, k, n, y, ep);
  }
}

// Products below this many multiply-adds run on the calling thread (a worker's hand-off costs
// more than half of them saves).
constexpr int64_t kSplitMacs = int64_t(1) << 17;

// Threads split the rows of a and y where each gets four row blocks or more, else the panels. By
// rows, a thread reads only the rows of a it wrote in the op before (a transformer's chain of
// products, bias, GELU and layer norm works row by row) and writes the rows the next op reads;
// each thread then reads all the panels for half the row blocks, as many bytes of b as half the
// panels for all of them. AMD EPYC (AVX2), 2 threads, a VM whose cores exchange a cache line in
// 430 ns: the BERT-style encoder of benchmarks/inference.py at batch 1 took 2.47 ms, 2.78 split
// by panels; the MLP's 64x784x256 product 290 us, 306 by panels (its 800 KiB of panels read from
// L3 by rows, half of them from L2 by panels).
void product(const float* a, int64_t m, int64_t k, int64_t lda, const float* panels, int64_t n, float* y,
             const Epilogue& ep) {
  const int64_t count = (n + NR - 1) / NR;
  const int64_t threads = m * n * k < kSplitMacs ? 1 : num_threads();
  auto run = [&](int64_t r0, int64_t r1, int64_t p0, int64_t p1) {  // rows [r0, r1) x panels [p0, p1)
    for (; r0 < r1; r0 += MR) {
      const int64_t rows = std::min(MR, r1 - r0);
      if (rows == MR) row_block<MR>(a + r0 * lda, lda, panels, p0, p1, k, n, y + r0 * n, ep);
      else row_tail<MR - 1>(rows, a + r0 * lda, lda, panels, p0, p1, k, n, y + r0 * n, ep);
    }
  };
  if (threads > 1 && m >= 4 * MR * threads)
    parallel_for(m, (m + threads - 1) / threads, [&](int64_t r0, int64_t r1) { run(r0, r1, 0, count); });
  else parallel_for(count, (count + threads - 1) / threads, [&](int64_t p0, int64_t p1) { run(0, m, p0, p1); });
}

}  // namespace

void add_gemm(Kernels& kt) {
  kt.matmul_constant = [](const Tensor& y, const Tensor& a, const Tensor& b, const Tensor& bias, bool relu) {
    const int64_t m = a.dim(0), k = a.dim(1), n = b.dim(1), sk = b.strides()[0], sn = b.strides()[1];
    const float* bp = b.data<float>();
    // the panels, [n / NR rounded up][k][NR], kept beside b's storage
    std::shared_ptr<const void> kept = b.storage()->derived({'g', b.offset(), NR, k, n, sk, sn}, [&] {
      auto p = std::make_shared<std::vector<float>>(size_t((n + NR - 1) / NR * k * NR));
      pack(bp, k, n, sk, sn, p->data());
      return std::shared_ptr<const void>(std::move(p));
    });
    const float* panels = static_cast<const std::vector<float>*>(kept.get())->data();
    std::vector<float> padded;  // the bias over whole panels (zeros past n)
    if (bias.defined()) {
      padded.assign(size_t((n + NR - 1) / NR * NR), 0.0f);
      std::copy(bias.data<float>(), bias.data<float>() + n, padded.begin());
    }
    product(a.data<float>(), m, k, a.strides()[0], panels, n, y.data<float>(),
            Epilogue{bias.defined() ? padded.data() : nullptr, relu});
  };
}

}  // namespace nexus::ops::cpu::NX_CPU_VARIANT
