// conv2d (im2col + BLAS gemm) and 2-D max/avg pooling on contiguous NCHW buffers.
//
// conv2d is a gemm: y[k, oh*ow] = w[k, c*kh*kw] * col[c*kh*kw, oh*ow], where col (im2col) holds,
// for every kernel tap, the input pixel each output position reads (0 in the padding); a group
// of images shares one gemm with their columns side by side. Backward reverses it: dcol = w^T *
// dy scattered back by col2im gives dx, and dw = dy * col^T summed over the batch.
#include "ops/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "ops/blas.h"
#include "tensor/allocator.h"

// The direct kernels' lambdas return GCC vectors wider than the baseline's registers; GCC notes
// that their ABI differs between variants, which is moot for functions local to this file.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace nexus::ops::cpu::NX_CPU_VARIANT {
namespace {

// Sums over windows, rows and the batch are carried in double for both float and double.
using Acc = double;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The output positions [lo, hi) along one axis whose input index o*stride - pad + tap lies
// inside [0, in). Outside that range the tap reads padding.
struct Range {
  int64_t lo, hi;
};

Range valid_range(int64_t out, int64_t in, int64_t stride, int64_t pad, int64_t tap) {
  const int64_t first = pad - tap;     // need o*stride >= first
  const int64_t end = in + pad - tap;  // need o*stride < end
  const int64_t lo = std::min(out, first <= 0 ? int64_t{0} : ceil_div(first, stride));
  const int64_t hi = std::min(out, end <= 0 ? int64_t{0} : ceil_div(end, stride));
  return {lo, std::max(lo, hi)};
}

// ---- conv2d helpers -------------------------------------------------------------------------

// Element counts of one image.
struct ConvSizes {
  int64_t in_img;   // c*h*w
  int64_t out_img;  // k*oh*ow
  int64_t taps;     // c*kh*kw: rows of col, columns of w
  int64_t pixels;   // oh*ow: columns of col and of y
};

ConvSizes conv_sizes(const Conv2dGeometry& g) {
  const int64_t pixels = g.out_h() * g.out_w();
  const int64_t taps = g.c * g.kh * g.kw;
  return {g.c * g.h * g.w, g.k * pixels, taps, pixels};
}

// col[(ci*kh + i)*kw + j][p] = x[ci][oh*sh - ph + i][ow*sw - pw + j] (p = oh*ow_n + ow), or 0
// in the padding. Rows of col are ld elements apart, so images of a group sit side by side.
template <class T> void im2col(const Conv2dGeometry& g, const T* x, T* col, int64_t ld) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  for (int64_t ci = 0; ci < g.c; ++ci) {
    const T* plane = x + ci * g.h * g.w;
    for (int64_t i = 0; i < g.kh; ++i) {
      const Range rh = valid_range(oh_n, g.h, g.stride_h, g.pad_h, i);
      for (int64_t j = 0; j < g.kw; ++j, col += ld) {
        const Range rw = valid_range(ow_n, g.w, g.stride_w, g.pad_w, j);
        // Rows are short (LeNet: 10 to 28 columns): plain loops, not a memcpy/memset call each.
        T* out = col;
        for (int64_t oh = 0; oh < oh_n; ++oh, out += ow_n) {
          if (oh < rh.lo || oh >= rh.hi) {
            for (int64_t ow = 0; ow < ow_n; ++ow) out[ow] = T(0);
            continue;
          }
          const T* src = plane + (oh * g.stride_h - g.pad_h + i) * g.w - g.pad_w + j;
          for (int64_t ow = 0; ow < rw.lo; ++ow) out[ow] = T(0);
          if (g.stride_w == 1)
            for (int64_t ow = rw.lo; ow < rw.hi; ++ow) out[ow] = src[ow];
          else
            for (int64_t ow = rw.lo; ow < rw.hi; ++ow) out[ow] = src[ow * g.stride_w];
          for (int64_t ow = rw.hi; ow < ow_n; ++ow) out[ow] = T(0);
        }
      }
    }
  }
}

// The adjoint of im2col: dx = 0, then each col entry is added to the pixel it was read from.
template <class T> void col2im(const Conv2dGeometry& g, const T* col, int64_t ld, T* dx) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  std::fill(dx, dx + g.c * g.h * g.w, T(0));
  for (int64_t ci = 0; ci < g.c; ++ci) {
    T* plane = dx + ci * g.h * g.w;
    for (int64_t i = 0; i < g.kh; ++i) {
      const Range rh = valid_range(oh_n, g.h, g.stride_h, g.pad_h, i);
      for (int64_t j = 0; j < g.kw; ++j, col += ld) {
        const Range rw = valid_range(ow_n, g.w, g.stride_w, g.pad_w, j);
        for (int64_t oh = rh.lo; oh < rh.hi; ++oh) {
          const T* src = col + oh * ow_n;
          T* dst = plane + (oh * g.stride_h - g.pad_h + i) * g.w - g.pad_w + j;
          for (int64_t ow = rw.lo; ow < rw.hi; ++ow) dst[ow * g.stride_w] += src[ow];
        }
      }
    }
  }
}

// Images are processed in groups: the group's columns side by side make one gemm of
// k x taps x (images*pixels) instead of one small gemm per image (LeNet's second conv is
// 16x150x100 per image, where BLAS runs far below its peak). A group's col buffer is kept
// near kGroupElems elements.
constexpr int64_t kGroupElems = int64_t(1) << 17;

int64_t group_size(const Conv2dGeometry& g, const ConvSizes& s) {
  return std::clamp<int64_t>(kGroupElems / std::max<int64_t>(s.taps * s.pixels, 1), 1, std::max<int64_t>(g.n, 1));
}

// Small convolutions (LeNet: 1->6 and 6->16 channels, 5x5) run direct instead of through im2col + gemm:
// per image, each output pixel's row of k channels accumulates x * w[tap][0..k) over the taps,
// a k-wide vector FMA into an accumulator that stays in L1; the im2col buffer (and its trip
// through L2) disappears. Large ones (many channels) stay with BLAS, which wins there.
bool direct_conv(const Conv2dGeometry& g, const ConvSizes& s) { return g.k <= 32 && s.taps <= 512; }

// The channel vector width of the direct kernels: k rounded up to 8, 16 or 32 (the extra
// channels carry zero weights and are never written out).
int64_t direct_width(int64_t k) { return k <= 8 ? 8 : k <= 16 ? 16 : 32; }

// A padded conv runs the unpadded kernels on a zero-padded copy of the image (c planes of
// (h + 2*pad_h) x (w + 2*pad_w)); returns that copy's geometry.
Conv2dGeometry unpadded(const Conv2dGeometry& g) {
  Conv2dGeometry p = g;
  p.h += 2 * g.pad_h;
  p.w += 2 * g.pad_w;
  p.pad_h = p.pad_w = 0;
  return p;
}

template <class T> const T* pad_image(const Conv2dGeometry& g, const T* x, T* padded) {
  if (g.pad_h == 0 && g.pad_w == 0) return x;
  const int64_t ph = g.h + 2 * g.pad_h, pw = g.w + 2 * g.pad_w;
  std::fill(padded, padded + g.c * ph * pw, T(0));
  for (int64_t ci = 0; ci < g.c; ++ci)
    for (int64_t r = 0; r < g.h; ++r) {
      const T* src = x + (ci * g.h + r) * g.w;
      std::copy(src, src + g.w, padded + (ci * ph + r + g.pad_h) * pw + g.pad_w);
    }
  return padded;
}

// One unpadded image, register-blocked: R output pixels of a row at a time, each a vector of K
// channel sums kept in registers across all taps; then y[k][pixel] = acc[pixel][k]. wt is w
// transposed to [tap][K] (zero beyond k), bias K wide.
template <class T, int64_t KB> void conv_image_direct(const Conv2dGeometry& g, const ConvSizes& s, const T* x,
                                                      const T* wt, const T* bias, T* acc, T* y) {
  constexpr int64_t K = KB, R = 4;
  typedef T V __attribute__((vector_size(sizeof(T) * K)));  // (a `using` would drop the attribute)
  const int64_t oh_n = g.out_h(), ow_n = g.out_w(), sw = g.stride_w;
  V b0{};
  if (bias != nullptr) std::memcpy(&b0, bias, sizeof(V));
  auto pixels = [&](int64_t oh, int64_t ow, auto r_const) {
    constexpr int64_t r_n = decltype(r_const)::value;
    V a[r_n];
    for (int64_t r = 0; r < r_n; ++r) a[r] = b0;
    const T* w = wt;
    for (int64_t ci = 0; ci < g.c; ++ci) {
      for (int64_t i = 0; i < g.kh; ++i) {
        const T* src = x + (ci * g.h + oh * g.stride_h + i) * g.w + ow * sw;
        for (int64_t j = 0; j < g.kw; ++j, w += K) {
          V wv;
          std::memcpy(&wv, w, sizeof(V));
          for (int64_t r = 0; r < r_n; ++r) a[r] += src[j + r * sw] * wv;
        }
      }
    }
    for (int64_t r = 0; r < r_n; ++r) std::memcpy(acc + (oh * ow_n + ow + r) * K, &a[r], sizeof(V));
  };
  for (int64_t oh = 0; oh < oh_n; ++oh) {
    int64_t ow = 0;
    for (; ow + R <= ow_n; ow += R) pixels(oh, ow, std::integral_constant<int64_t, R>{});
    for (; ow < ow_n; ++ow) pixels(oh, ow, std::integral_constant<int64_t, 1>{});
  }
  for (int64_t k = 0; k < g.k; ++k)
    for (int64_t p = 0; p < s.pixels; ++p) y[k * s.pixels + p] = acc[p * K + k];
}

// The weight gradient of one unpadded image, direct (the same k as the forward, K = its vector width): for every tap,
// dwt[tap][0..k) += sum over pixels of x[pixel + tap] * dy[0..k)[pixel], four pixels' products
// summed in separate registers. dyt: scratch of pixels*K for dy transposed to [pixel][k].
template <class T, int64_t KB>
void conv_image_dw_direct(const Conv2dGeometry& g, const ConvSizes& s, const T* x, const T* dy, T* dyt, T* dwt) {
  constexpr int64_t K = KB;
  typedef T V __attribute__((vector_size(sizeof(T) * K)));  // (a `using` would drop the attribute)
  const int64_t oh_n = g.out_h(), ow_n = g.out_w(), sw = g.stride_w;
  for (int64_t k = 0; k < K; ++k)
    for (int64_t p = 0; p < s.pixels; ++p) dyt[p * K + k] = k < g.k ? dy[k * s.pixels + p] : T(0);
  auto load = [](const T* p) {
    V v;
    std::memcpy(&v, p, sizeof(V));
    return v;
  };
  T* w = dwt;
  for (int64_t ci = 0; ci < g.c; ++ci) {
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j, w += K) {
        V a0{}, a1{}, a2{}, a3{};
        for (int64_t oh = 0; oh < oh_n; ++oh) {
          const T* src = x + (ci * g.h + oh * g.stride_h + i) * g.w + j;
          const T* d = dyt + oh * ow_n * K;
          int64_t ow = 0;
          for (; ow + 4 <= ow_n; ow += 4) {
            a0 += src[ow * sw] * load(d + ow * K);
            a1 += src[(ow + 1) * sw] * load(d + (ow + 1) * K);
            a2 += src[(ow + 2) * sw] * load(d + (ow + 2) * K);
            a3 += src[(ow + 3) * sw] * load(d + (ow + 3) * K);
          }
          for (; ow < ow_n; ++ow) a0 += src[ow * sw] * load(d + ow * K);
        }
        V sum = load(w) + ((a0 + a1) + (a2 + a3));
        std::memcpy(w, &sum, sizeof(V));
      }
    }
  }
}

// Runs fn(b) for each image of [b0, b1) over the pool.
template <class Fn> void for_images(int64_t b0, int64_t b1, const Fn& fn) {
  parallel_for(b1 - b0, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = b0 + begin; b < b0 + end; ++b) fn(b);
  });
}

// The group's columns: im2col of images [b0, b1) side by side (ld = images*pixels).
template <class T>
void group_col(const Conv2dGeometry& g, const ConvSizes& s, const T* x, int64_t b0, int64_t b1, T* col) {
  const int64_t ld = (b1 - b0) * s.pixels;
  for_images(b0, b1, [&](int64_t b) { im2col(g, x + b * s.in_img, col + (b - b0) * s.pixels, ld); });
}

// (k, images*pixels) <-> the images' (k, pixels) blocks of y / dy.
template <class T> void gather_group(const ConvSizes& s, int64_t k, const T* y, int64_t b0, int64_t b1, T* yg) {
  const int64_t ld = (b1 - b0) * s.pixels;
  for_images(b0, b1, [&](int64_t b) {
    for (int64_t kk = 0; kk < k; ++kk) {
      const T* src = y + b * s.out_img + kk * s.pixels;
      std::copy(src, src + s.pixels, yg + kk * ld + (b - b0) * s.pixels);
    }
  });
}

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

// ---- conv2d -------------------------------------------------------------------------------------

// Groups are independent forward, so they run in parallel, each task with its own scratch (the
// gemms inside then run inline). A single group (one huge image) keeps the pool for its gemm.
template <class T> void conv2d_forward(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  const ConvSizes s = conv_sizes(g);
  if (direct_conv(g, s)) {
    const int64_t kb = direct_width(g.k);
    alloc::Scratch<T> wt(static_cast<size_t>(s.taps * kb)), bias_kb(static_cast<size_t>(kb));
    for (int64_t t = 0; t < s.taps; ++t)
      for (int64_t k = 0; k < kb; ++k) wt.data()[t * kb + k] = k < g.k ? w[k * s.taps + t] : T(0);
    for (int64_t k = 0; k < kb; ++k) bias_kb.data()[k] = bias != nullptr && k < g.k ? bias[k] : T(0);
    auto image = kb == 8 ? conv_image_direct<T, 8> : kb == 16 ? conv_image_direct<T, 16> : conv_image_direct<T, 32>;
    const Conv2dGeometry gp = unpadded(g);
    parallel_for(g.n, 1, [&](int64_t b0, int64_t b1) {
      alloc::Scratch<T> acc(static_cast<size_t>(s.pixels * kb)), xp(static_cast<size_t>(gp.c * gp.h * gp.w));
      for (int64_t b = b0; b < b1; ++b) {
        const T* xb = pad_image(g, x + b * s.in_img, xp.data());
        image(gp, s, xb, wt.data(), bias_kb.data(), acc.data(), y + b * s.out_img);
      }
    });
    return;
  }
  const int64_t group = group_size(g, s), groups = ceil_div(g.n, group);
  parallel_for(groups, 1, [&](int64_t q0, int64_t q1) {
    alloc::Scratch<T> col(static_cast<size_t>(s.taps * s.pixels * group));
    alloc::Scratch<T> yg(static_cast<size_t>(g.k * s.pixels * group));
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t b0 = q * group, b1 = std::min(g.n, b0 + group), ld = (b1 - b0) * s.pixels;
      group_col(g, s, x, b0, b1, col.data());
      gemm<T>(false, false, g.k, ld, s.taps, T(1), w, s.taps, col.data(), ld, T(0), yg.data(), ld);
      for_images(b0, b1, [&](int64_t b) {
        for (int64_t k = 0; k < g.k; ++k) {
          const T* src = yg.data() + k * ld + (b - b0) * s.pixels;
          T* dst = y + b * s.out_img + k * s.pixels;
          const T add = bias != nullptr ? bias[k] : T(0);
          for (int64_t p = 0; p < s.pixels; ++p) dst[p] = src[p] + add;
        }
      });
    }
  });
}

// out[k] = the sum of the runs' partials [run][k], added in run order (the same on every call).
template <class T> void add_runs(const std::vector<Acc>& partials, int64_t runs, int64_t k_n, T* out) {
  for (int64_t k = 0; k < k_n; ++k) {
    Acc sum = 0;
    for (int64_t r = 0; r < runs; ++r) sum += partials[size_t(r * k_n + k)];
    out[k] = static_cast<T>(sum);
  }
}

// dw and dbias with the direct kernel: one partial per thread's run of images, added in order.
template <class T> void conv_backward_weight_direct(const Conv2dGeometry& g, const ConvSizes& s, const T* x,
                                                    const T* dy, T* dw, T* dbias) {
  const int64_t runs = std::max<int64_t>(1, std::min<int64_t>(g.n, num_threads()));
  const int64_t kb = direct_width(g.k), dw_size = kb * s.taps;
  alloc::Scratch<T> dwt_runs(static_cast<size_t>(runs * dw_size));  // [run][tap][kb]
  std::vector<Acc> bias_runs(static_cast<size_t>(runs * g.k), Acc(0));
  auto image = kb == 8    ? conv_image_dw_direct<T, 8>
               : kb == 16 ? conv_image_dw_direct<T, 16>
                          : conv_image_dw_direct<T, 32>;
  const Conv2dGeometry gp = unpadded(g);
  parallel_for(runs, 1, [&](int64_t r0, int64_t r1) {
    alloc::Scratch<T> dyt(static_cast<size_t>(s.pixels * kb)), xp(static_cast<size_t>(gp.c * gp.h * gp.w));
    for (int64_t r = r0; r < r1; ++r) {
      T* dwt = dwt_runs.data() + r * dw_size;
      std::fill(dwt, dwt + dw_size, T(0));
      for (int64_t b = r * g.n / runs; b < (r + 1) * g.n / runs; ++b) {
        const T* dy_b = dy + b * s.out_img;
        if (dw != nullptr) image(gp, s, pad_image(g, x + b * s.in_img, xp.data()), dy_b, dyt.data(), dwt);
        for (int64_t k = 0; k < g.k; ++k) {
          const T* row = dy_b + k * s.pixels;
          bias_runs[r * g.k + k] = std::accumulate(row, row + s.pixels, bias_runs[r * g.k + k]);
        }
      }
    }
  });
  if (dw != nullptr) {
    for (int64_t k = 0; k < g.k; ++k) {
      for (int64_t t = 0; t < s.taps; ++t) {
        T sum = dwt_runs.data()[t * kb + k];
        for (int64_t r = 1; r < runs; ++r) sum += dwt_runs.data()[r * dw_size + t * kb + k];
        dw[k * s.taps + t] = sum;
      }
    }
  }
  if (dbias != nullptr) add_runs(bias_runs, runs, g.k, dbias);
}

// Per group: dyg = the group's dy as (k, images*pixels); dw += dyg * col^T (one gemm whose inner
// dimension is every pixel of the group); dcol = w^T * dyg, scattered back by col2im into dx.
// The groups are cut into one contiguous run per thread; each run sums its own dw and dbias
// (dbias in double), and the runs are added in order, so the result is the same on every call
// with the same thread count.
template <class T>
void conv2d_backward(const Conv2dGeometry& g, const T* x, const T* w, const T* dy, T* dx, T* dw, T* dbias) {
  const ConvSizes s = conv_sizes(g);
  if (direct_conv(g, s) && (dw != nullptr || dbias != nullptr)) {
    conv_backward_weight_direct(g, s, x, dy, dw, dbias);
    dw = dbias = nullptr;
  }
  if (dx == nullptr && dw == nullptr && dbias == nullptr) return;
  const int64_t group = group_size(g, s), groups = ceil_div(g.n, group);
  const int64_t runs = std::max<int64_t>(1, std::min<int64_t>(groups, num_threads()));
  const int64_t dw_size = g.k * s.taps;
  alloc::Scratch<T> dw_runs(static_cast<size_t>(dw != nullptr ? runs * dw_size : 0));
  std::vector<Acc> bias_runs(static_cast<size_t>(runs * g.k), Acc(0));
  parallel_for(runs, 1, [&](int64_t r0, int64_t r1) {
    alloc::Scratch<T> col(static_cast<size_t>(s.taps * s.pixels * group));
    alloc::Scratch<T> dyg(static_cast<size_t>(g.k * s.pixels * group));
    for (int64_t r = r0; r < r1; ++r) {
      T* dw_r = dw != nullptr ? dw_runs.data() + r * dw_size : nullptr;
      Acc* bias_r = bias_runs.data() + r * g.k;
      if (dw_r != nullptr) std::fill(dw_r, dw_r + dw_size, T(0));
      for (int64_t q = r * groups / runs; q < (r + 1) * groups / runs; ++q) {
        const int64_t b0 = q * group, b1 = std::min(g.n, b0 + group), ld = (b1 - b0) * s.pixels;
        gather_group(s, g.k, dy, b0, b1, dyg.data());
        if (dbias != nullptr) {
          for (int64_t k = 0; k < g.k; ++k) {
            const T* row = dyg.data() + k * ld;
            bias_r[k] = std::accumulate(row, row + ld, bias_r[k]);
          }
        }
        if (dw_r != nullptr) {
          group_col(g, s, x, b0, b1, col.data());
          gemm<T>(false, true, g.k, s.taps, ld, T(1), dyg.data(), ld, col.data(), ld, T(1), dw_r, s.taps);
        }
        if (dx != nullptr) {
          gemm<T>(true, false, s.taps, ld, g.k, T(1), w, s.taps, dyg.data(), ld, T(0), col.data(), ld);
          for_images(b0, b1, [&](int64_t b) { col2im(g, col.data() + (b - b0) * s.pixels, ld, dx + b * s.in_img); });
        }
      }
    }
  });
  if (dw != nullptr) {
    std::copy(dw_runs.data(), dw_runs.data() + dw_size, dw);
    for (int64_t r = 1; r < runs; ++r) {
      const T* part = dw_runs.data() + r * dw_size;
      for (int64_t i = 0; i < dw_size; ++i) dw[i] += part[i];
    }
  }
  if (dbias != nullptr) add_runs(bias_runs, runs, g.k, dbias);
}

// ---- max pooling --------------------------------------------------------------------------------

template <class T> void max_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y, int64_t* argmax) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  for_each_plane(g, [&](int64_t p) {
    const T* plane = x + p * g.h * g.w;
    T* out = y + p * oh_n * ow_n;
    int64_t* idx = argmax != nullptr ? argmax + p * oh_n * ow_n : nullptr;
    if (g.pad == 0 && idx != nullptr) {
      // Unpadded (every window inside): taps outermost, output columns innermost and
      // branch-free, so a row of windows advances together instead of one window at a time
      // mispredicting on random data. Same winner as window_max: the first maximum, or the
      // last NaN.
      const int64_t sw = g.stride_w, n = ow_n;
      for (int64_t oh = 0; oh < oh_n; ++oh) {
        T* __restrict best = out + oh * ow_n;
        int64_t* __restrict at = idx + oh * ow_n;
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

template <class T> T* ptr(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }

void add_conv(Kernels& k) {
  k.conv2d_forward = [](const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                        const Tensor& y) {
    dispatch_float(y.dtype(), "conv2d", [&](auto t) {
      using T = decltype(t);
      conv2d_forward<T>(g, x.data<T>(), w.data<T>(), ptr<T>(bias), y.data<T>());
    });
  };
  k.conv2d_backward = [](const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                         const Tensor& dw, const Tensor& dbias) {
    dispatch_float(dy.dtype(), "conv2d backward", [&](auto t) {
      using T = decltype(t);
      conv2d_backward<T>(g, x.data<T>(), w.data<T>(), dy.data<T>(), ptr<T>(dx), ptr<T>(dw), ptr<T>(dbias));
    });
  };
  k.max_pool2d_forward = [](const Pool2dGeometry& g, const Tensor& x, const Tensor& y, const Tensor& argmax) {
    dispatch_float(y.dtype(), "max_pool2d", [&](auto t) {
      using T = decltype(t);
      max_pool2d_forward<T>(g, x.data<T>(), y.data<T>(), ptr<int64_t>(argmax));
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
