#include "ops/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "base/thread_pool.h"
#include "ops/cpu/vec_math.h"

namespace nexus::ops::cpu::NX_CPU_VARIANT {
namespace {

template <class T> T exp_of(T v) {
  if constexpr (std::is_same_v<T, float>) return vec::exp(v);
  else return std::exp(v);
}

int64_t row_grain(int64_t classes) { return std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(classes, 1)); }

}  // namespace

template <class T>
void xent_forward(const T* x, const int64_t* labels, int64_t rows, int64_t classes, T* nll, T* shift, T* logsum) {
  parallel_for(rows, row_grain(classes), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* row = x + r * classes;
      T m = -std::numeric_limits<T>::infinity();
      bool nan = false;
      for (int64_t j = 0; j < classes; ++j) {
        nan |= row[j] != row[j];
        m = std::max(m, row[j]);
      }
      if (nan) {
        nll[r] = shift[r] = logsum[r] = std::numeric_limits<T>::quiet_NaN();
        continue;
      }
      if (!std::isfinite(m)) m = 0;  // all -inf (or an inf): no shift, the sum says it
      T s = 0;
      for (int64_t j = 0; j < classes; ++j) s += exp_of(row[j] - m);
      shift[r] = m;
      logsum[r] = std::log(s);
      nll[r] = (m - row[labels[r]]) + logsum[r];  // m - x[label] is exact for nearby values
    }
  });
}

template <class T> void xent_backward(const T* x, const int64_t* labels, const T* shift, const T* logsum, const T* g,
                                      int64_t g_stride, int64_t rows, int64_t classes, T* dx) {
  parallel_for(rows, row_grain(classes), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* row = x + r * classes;
      T* out = dx + r * classes;
      T gr = g[r * g_stride], m = shift[r], l = logsum[r];
      for (int64_t j = 0; j < classes; ++j) out[j] = exp_of((row[j] - m) - l) * gr;
      out[labels[r]] -= gr;
    }
  });
}

// Each row: m = its max (0 when that is not finite: NaN, or an infinity), e = exp(x - m), then
// e times 1 / sum(e), as ops::softmax composes them but for that product (a division per element
// took as long as the exp). The max and the sum run in 64 bytes of lanes (lane l takes the
// elements j = l mod kLanes), combined in order at the end, on every variant: the same bits
// whatever the vector width (a scalar chain per row ran at a fifth of the exp op's speed). The
// lanes are kParts vectors of the variant's width: GCC splits a 64-byte vector on AVX2 into
// scalar selects through the stack (softmax ran at 0.4x PyTorch's there).
template <class T> struct SoftmaxRow {
#if defined(__AVX512F__)
  static constexpr int64_t kBytes = 64;
#elif defined(__AVX__)
  static constexpr int64_t kBytes = 32;
#else
  static constexpr int64_t kBytes = 16;
#endif
  typedef T V __attribute__((vector_size(kBytes)));
  static constexpr int64_t kLanes = 64 / sizeof(T), kPart = kBytes / sizeof(T), kParts = 64 / kBytes;

  static V load(const T* p) {
    V v;
    std::memcpy(&v, p, sizeof(V));
    return v;
  }

  // The row's max; nan: whether it holds a NaN.
  static T max(const T* row, int64_t n, bool& nan) {
    V m[kParts], found[kParts] = {};
    for (auto& part : m) part = V{} - std::numeric_limits<T>::infinity();
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
      for (int64_t p = 0; p < kParts; ++p) {
        const V v = load(row + j + p * kPart);
        found[p] = v != v ? V{} + 1 : found[p];
        m[p] = v > m[p] ? v : m[p];
      }
    T out = -std::numeric_limits<T>::infinity();
    nan = false;
    for (int64_t p = 0; p < kParts; ++p)
      for (int64_t l = 0; l < kPart; ++l) nan |= found[p][l] != 0, out = m[p][l] > out ? m[p][l] : out;
    for (; j < n; ++j) nan |= row[j] != row[j], out = row[j] > out ? row[j] : out;
    return out;
  }

  // The sum of f(x) over the row; f takes a vector or a scalar.
  template <class F> static T sum(const T* row, int64_t n, const F& f) {
    V lanes[kParts] = {};
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
      for (int64_t p = 0; p < kParts; ++p) lanes[p] += f(load(row + j + p * kPart));
    T s = 0;
    for (int64_t p = 0; p < kParts; ++p)
      for (int64_t l = 0; l < kPart; ++l) s += lanes[p][l];
    for (; j < n; ++j) s += f(row[j]);
    return s;
  }
  static T sum(const T* row, int64_t n) {
    return sum(row, n, [](auto v) { return v; });
  }
};

template <class T> void softmax_rows(const T* x, int64_t rows, int64_t n, T* y) {
  parallel_for(rows, row_grain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* __restrict row = x + r * n;
      T* __restrict out = y + r * n;
      bool nan;
      T m = SoftmaxRow<T>::max(row, n, nan);
      if (nan || !std::isfinite(m)) m = 0;
      for (int64_t j = 0; j < n; ++j) out[j] = exp_of(row[j] - m);
      const T inv = T(1) / SoftmaxRow<T>::sum(out, n);
      for (int64_t j = 0; j < n; ++j) out[j] *= inv;
    }
  });
}

// Each row: mu = its mean, v = the mean of (x - mu)^2, y = (x - mu) / sqrt(v + eps), then times
// w and plus b where given: the composed layer_norm's formulas, its two reductions in lanes, and
// the rest in one pass that multiplies by the row's 1 / sqrt(v + eps) (within an ulp or two of
// the composed ops' division; a division per element was a third of a 128-wide row's time).
template <class T> void layer_norm_rows(const T* x, int64_t rows, int64_t n, const T* w, const T* b, double eps, T* y) {
  // four passes over each row (two sums, the normalisation, its store): a 128x128 layer norm,
  // one task at the grain of one pass, is two
  parallel_for(rows, row_grain(4 * n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* __restrict row = x + r * n;
      T* __restrict out = y + r * n;
      const T mu = SoftmaxRow<T>::sum(row, n) / T(n);
      const T v = SoftmaxRow<T>::sum(row, n, [mu](auto e) { return (e - mu) * (e - mu); }) / T(n);
      const T inv = T(1) / std::sqrt(v + T(eps));
      auto normalize = [&](auto scale, auto shift) {  // one pass: a division per row, not per element
        for (int64_t j = 0; j < n; ++j) {
          T e = (row[j] - mu) * inv;
          if constexpr (decltype(scale)::value) e *= w[j];
          if constexpr (decltype(shift)::value) e += b[j];
          out[j] = e;
        }
      };
      if (w != nullptr && b != nullptr) normalize(std::true_type{}, std::true_type{});
      else if (w != nullptr) normalize(std::true_type{}, std::false_type{});
      else if (b != nullptr) normalize(std::false_type{}, std::true_type{});
      else normalize(std::false_type{}, std::false_type{});
    }
  });
}

void add_xent(Kernels& k) {
  k.layer_norm_rows = [](const Tensor& y, const Tensor& x, int64_t n, const Tensor& w, const Tensor& b, double eps) {
    dispatch_float(x.dtype(), "layer_norm", [&](auto t) {
      using T = decltype(t);
      layer_norm_rows<T>(x.data<T>(), x.numel() / n, n, data_or_null<T>(w), data_or_null<T>(b), eps, y.data<T>());
    });
  };
  k.softmax_rows = [](const Tensor& y, const Tensor& x) {
    const int64_t n = x.shape().back(), rows = n == 0 ? 0 : x.numel() / n;
    dispatch_float(x.dtype(), "softmax", [&](auto t) {
      using T = decltype(t);
      softmax_rows<T>(x.data<T>(), rows, n, y.data<T>());
    });
  };
  k.xent_forward = [](const Tensor& x, const Tensor& labels, const Tensor& nll, const Tensor& stats) {
    const int64_t rows = x.shape()[0], classes = x.shape()[1];
    dispatch_float(x.dtype(), "cross_entropy", [&](auto t) {
      using T = decltype(t);
      xent_forward<T>(x.data<T>(), labels.data<int64_t>(), rows, classes, nll.data<T>(), stats.data<T>(),
                      stats.data<T>() + rows);
    });
  };
  k.xent_backward = [](const Tensor& x, const Tensor& labels, const Tensor& stats, const Tensor& g, bool per_row,
                       const Tensor& dx) {
    const int64_t rows = x.shape()[0], classes = x.shape()[1];
    dispatch_float(x.dtype(), "cross_entropy backward", [&](auto t) {
      using T = decltype(t);
      xent_backward<T>(x.data<T>(), labels.data<int64_t>(), stats.data<T>(), stats.data<T>() + rows, g.data<T>(),
                       per_row ? 1 : 0, rows, classes, dx.data<T>());
    });
  };
}

}  // namespace nexus::ops::cpu::NX_CPU_VARIANT
