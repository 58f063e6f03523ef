#include "ops/cpu/softmax_xent_kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/thread_pool.h"
#include "ops/cpu/vec_math.h"

namespace nexus::ops::cpu {
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

template void xent_forward<float>(const float*, const int64_t*, int64_t, int64_t, float*, float*, float*);
template void xent_forward<double>(const double*, const int64_t*, int64_t, int64_t, double*, double*, double*);
template void xent_backward<float>(const float*, const int64_t*, const float*, const float*, const float*, int64_t,
                                   int64_t, int64_t, float*);
template void xent_backward<double>(const double*, const int64_t*, const double*, const double*, const double*, int64_t,
                                    int64_t, int64_t, double*);

}  // namespace nexus::ops::cpu
