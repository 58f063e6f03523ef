// 2-D max and average pooling on contiguous NCHW buffers (conventions in conv_kernel.h).
#include "ops/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "base/thread_pool.h"

namespace nexus::ops::cpu::NX_CPU_VARIANT {
namespace {

// Sums over windows are carried in double for both float and double.
using Acc = double;

// ---- pooling helpers ------------------------------------------------------------------------

// The part of one pooling window that lies inside the input (padding excluded).
struct Window {
  int64_t h0, h1, w0, w1;  // rows [h0, h1), columns [w0, w1)
};

Window pool_window(const Pool2dGeometry& g, int64_t oh, int64_t ow) {
  const int64_t h0 = oh * g.stride_h - g.pad, w0 = ow * g.stride_w - g.pad;
  return {std::max<int64_t>(h0, 0), std::min(h0 + g.kh, g.h), std::max<int64_t>(w0, 0), std::min(w0 + g.kw, g.w)};
}

// Runs fn(plane) for each of the n*c planes, in parallel chunks of about kElementwiseGrain
// window reads each.
template <class Fn> void for_each_plane(const Pool2dGeometry& g, const Fn& fn) {
  const int64_t work = std::max<int64_t>(1, g.out_h() * g.out_w() * g.kh * g.kw);
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / work);
  parallel_for(g.n * g.c, grain, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) fn(p);
  });
}

// out[0, n) = the max of each 2x2 window of input rows r0 and r0 + w at stride 2, in the taps'
// order, NaN taking over as in window_max. A vector of outputs at a time, the pairs de-interleaved by
// shuffles; the last few by one more vector that reads on into the next row (its extra lanes
// dropped), or at the input's end through a copy: no branches and no scalar tail (the
// compiler's own vectorisation left rows of 5 and 14 outputs mostly to a branchy scalar loop,
// 3x slower than the vectors on LeNet's pools).
template <class T> void max_pool_2x2_row(const T* r0, int64_t w, T* out, int64_t n, const T* end) {
  constexpr int64_t L = 16 / sizeof(T);
  typedef T V __attribute__((vector_size(16)));
  using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  typedef I M __attribute__((vector_size(16)));
  M evens, odds;  // which lanes of a pair of vectors hold the windows' left and right columns
  if constexpr (L == 4) {
    evens = M{0, 2, 4, 6};
    odds = M{1, 3, 5, 7};
  } else {
    evens = M{0, 2};
    odds = M{1, 3};
  }
  auto vmax = [](V best, V v) { return (v > best) | (v != v) ? v : best; };
  auto chunk = [&](const T* a, const T* b) {  // 2L inputs of each row from a and b
    V a0, a1, b0, b1;
    std::memcpy(&a0, a, sizeof(V));
    std::memcpy(&a1, a + L, sizeof(V));
    std::memcpy(&b0, b, sizeof(V));
    std::memcpy(&b1, b + L, sizeof(V));
    V best = __builtin_shuffle(a0, a1, evens);
    best = vmax(best, __builtin_shuffle(a0, a1, odds));
    best = vmax(best, __builtin_shuffle(b0, b1, evens));
    return vmax(best, __builtin_shuffle(b0, b1, odds));
  };
  const T* r1 = r0 + w;
  int64_t o = 0;
  for (; o + L <= n; o += L) {
    const V m = chunk(r0 + 2 * o, r1 + 2 * o);
    std::memcpy(out + o, &m, sizeof(V));
  }
  if (o == n) return;
  T m[L];
  if (r1 + 2 * o + 2 * L <= end) {  // the input goes on (the next row or plane): read past the row
    const V v = chunk(r0 + 2 * o, r1 + 2 * o);
    std::memcpy(m, &v, sizeof(V));
  } else {  // the input's last row
    T a[2 * L], b[2 * L];
    std::fill(a, a + 2 * L, -std::numeric_limits<T>::infinity());
    std::fill(b, b + 2 * L, -std::numeric_limits<T>::infinity());
    std::copy(r0 + 2 * o, r0 + 2 * n, a);
    std::copy(r1 + 2 * o, r1 + 2 * n, b);
    const V v = chunk(a, b);
    std::memcpy(m, &v, sizeof(V));
  }
  std::copy(m, m + (n - o), out + o);
}

// Max and its flat index over one window. Like PyTorch, a NaN always takes over, so any NaN in
// the window makes the output NaN. pad <= kernel/2 guarantees the window is not empty.
template <class T> void window_max(const T* plane, int64_t width, const Window& win, T* out, int64_t* out_idx) {
  T best = -std::numeric_limits<T>::infinity();
  int64_t best_idx = win.h0 * width + win.w0;
  for (int64_t ih = win.h0; ih < win.h1; ++ih) {
    for (int64_t iw = win.w0; iw < win.w1; ++iw) {
      const T v = plane[ih * width + iw];
      if (v > best || std::isnan(v)) {
        best = v;
        best_idx = ih * width + iw;
      }
    }
  }
  *out = best;
  *out_idx = best_idx;
}

}  // namespace

// ---- max pooling --------------------------------------------------------------------------------

template <class T> void max_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y, int64_t* argmax) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  for_each_plane(g, [&](int64_t p) {
    const T* plane = x + p * g.h * g.w;
    T* out = y + p * oh_n * ow_n;
    int64_t* idx = argmax != nullptr ? argmax + p * oh_n * ow_n : nullptr;
    if (g.pad == 0 && idx == nullptr && g.kh == 2 && g.kw == 2 && g.stride_h == 2 && g.stride_w == 2) {
      // 2x2 windows at stride 2, values only (inference): two input rows per output row.
      const T* end = x + g.n * g.c * g.h * g.w;
      for (int64_t oh = 0; oh < oh_n; ++oh) max_pool_2x2_row(plane + 2 * oh * g.w, g.w, out + oh * ow_n, ow_n, end);
      return;
    }
    if (g.pad == 0) {
      // Unpadded (every window inside): taps outermost, output columns innermost and
      // branch-free, so a row of windows advances together instead of one window at a time
      // mispredicting on random data. Same winner as window_max: the first maximum, or the
      // last NaN.
      const int64_t sw = g.stride_w, n = ow_n;
      std::vector<int64_t> own(idx != nullptr ? 0 : size_t(n));  // a row's winners, when not kept
      for (int64_t oh = 0; oh < oh_n; ++oh) {
        T* __restrict best = out + oh * ow_n;
        int64_t* __restrict at = idx != nullptr ? idx + oh * ow_n : own.data();
        for (int64_t ow = 0; ow < n; ++ow) {
          best[ow] = -std::numeric_limits<T>::infinity();
          at[ow] = oh * g.stride_h * g.w + ow * sw;
        }
        for (int64_t i = 0; i < g.kh; ++i) {
          for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t base = (oh * g.stride_h + i) * g.w + j;
            const T* __restrict row = plane + base;
            for (int64_t ow = 0; ow < n; ++ow) {
              const T v = row[ow * sw];
              const bool take = (v > best[ow]) | (v != v);
              best[ow] = take ? v : best[ow];
              at[ow] = take ? base + ow * sw : at[ow];
            }
          }
        }
      }
      return;
    }
    int64_t scratch = 0;
    for (int64_t oh = 0; oh < oh_n; ++oh) {
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        const int64_t o = oh * ow_n + ow;
        window_max(plane, g.w, pool_window(g, oh, ow), out + o, idx ? idx + o : &scratch);
      }
    }
  });
}

template <class T> void max_pool2d_backward(const Pool2dGeometry& g, const T* dy, const int64_t* argmax, T* dx) {
  const int64_t out_plane = g.out_h() * g.out_w(), in_plane = g.h * g.w;
  for_each_plane(g, [&](int64_t p) {
    T* plane = dx + p * in_plane;
    std::fill(plane, plane + in_plane, T(0));
    const T* grad = dy + p * out_plane;
    const int64_t* idx = argmax + p * out_plane;
    for (int64_t o = 0; o < out_plane; ++o) plane[idx[o]] += grad[o];
  });
}

// ---- average pooling ----------------------------------------------------------------------------

template <class T> void avg_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  const Acc scale = Acc(1) / Acc(g.kh * g.kw);
  for_each_plane(g, [&](int64_t p) {
    const T* plane = x + p * g.h * g.w;
    T* out = y + p * oh_n * ow_n;
    for (int64_t oh = 0; oh < oh_n; ++oh) {
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        const Window win = pool_window(g, oh, ow);
        Acc sum = 0;
        for (int64_t ih = win.h0; ih < win.h1; ++ih) {
          for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += plane[ih * g.w + iw];
        }
        out[oh * ow_n + ow] = static_cast<T>(sum * scale);
      }
    }
  });
}

template <class T> void avg_pool2d_backward(const Pool2dGeometry& g, const T* dy, T* dx) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  const Acc scale = Acc(1) / Acc(g.kh * g.kw);
  for_each_plane(g, [&](int64_t p) {
    T* plane = dx + p * g.h * g.w;
    std::fill(plane, plane + g.h * g.w, T(0));
    const T* grad = dy + p * oh_n * ow_n;
    for (int64_t oh = 0; oh < oh_n; ++oh) {
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        const Window win = pool_window(g, oh, ow);
        const T share = static_cast<T>(grad[oh * ow_n + ow] * scale);
        for (int64_t ih = win.h0; ih < win.h1; ++ih) {
          for (int64_t iw = win.w0; iw < win.w1; ++iw) plane[ih * g.w + iw] += share;
        }
      }
    }
  });
}

// ---- the table's entries: tensors in, the templates above per dtype -----------------------------

void add_pool(Kernels& k) {
  k.max_pool2d_forward = [](const Pool2dGeometry& g, const Tensor& x, const Tensor& y, const Tensor& argmax) {
    dispatch_float(y.dtype(), "max_pool2d", [&](auto t) {
      using T = decltype(t);
      max_pool2d_forward<T>(g, x.data<T>(), y.data<T>(), data_or_null<int64_t>(argmax));
    });
  };
  k.max_pool2d_backward = [](const Pool2dGeometry& g, const Tensor& dy, const Tensor& argmax, const Tensor& dx) {
    dispatch_float(dx.dtype(), "max_pool2d backward", [&](auto t) {
      using T = decltype(t);
      max_pool2d_backward<T>(g, dy.data<T>(), argmax.data<int64_t>(), dx.data<T>());
    });
  };
  k.avg_pool2d_forward = [](const Pool2dGeometry& g, const Tensor& x, const Tensor& y) {
    dispatch_float(y.dtype(), "avg_pool2d", [&](auto t) {
      using T = decltype(t);
      avg_pool2d_forward<T>(g, x.data<T>(), y.data<T>());
    });
  };
  k.avg_pool2d_backward = [](const Pool2dGeometry& g, const Tensor& dy, const Tensor& dx) {
    dispatch_float(dx.dtype(), "avg_pool2d backward", [&](auto t) {
      using T = decltype(t);
      avg_pool2d_backward<T>(g, dy.data<T>(), dx.data<T>());
    });
  };
}

}  // namespace nexus::ops::cpu::NX_CPU_VARIANT
