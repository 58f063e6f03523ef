// The plane kernels of conv2d: convolutions or groups with few output channels (depthwise: one;
// LeNet's first layer: six), where the direct kernel's vectors of output channels would be mostly
// empty. conv_kernel.cpp decides when (plane_kernels) and calls these.
#include <algorithm>
#include <cstring>
#include <vector>

#include "base/thread_pool.h"
#include "ops/cpu/conv_common.h"
#include "tensor/allocator.h"

// GCC vectors wider than the baseline's registers; their ABI differs between variants, which is
// moot for functions local to this file.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace nexus::ops::cpu::NX_CPU_VARIANT {
namespace {

// The forward of a group with few output channels: tiles of R output rows x one vector of
// output columns, whose R sums stay in registers across the group's input channels and taps
// (one load and one fused multiply-add per row of the tile and tap). The input planes are first
// copied zero-padded and split by the column stride into `stride_w` phases, phase p holding
// padded columns p, p + stride_w, ...: tap column j then reads phase j % stride_w from column
// j / stride_w on, a contiguous vector at any stride. Each phase has room for the last tile's
// full vector at the largest tap offset.
template <class T> struct PlaneConv {
  typedef T V __attribute__((vector_size(kVecBytes)));
  static constexpr int64_t L = kVecBytes / sizeof(T), R = kAccRegs[1] / 2;

  const Conv2dGeometry& g;
  // The output's height and width, worked out once: g.out_h() divides, and after a store (which
  // may alias g) the compiler divides again (14 divisions a 14x14 plane, as long as its taps).
  int64_t oh_n, ow_n;
  int64_t rows, phase_w, plane;  // a padded plane's rows, a phase's width, a plane's elements
  std::vector<int64_t> offsets;  // where tap (i, j) of output (0, 0) reads in a padded plane

  explicit PlaneConv(const Conv2dGeometry& geometry)
      : g(geometry),
        oh_n(geometry.out_h()),
        ow_n(geometry.out_w()),
        rows(geometry.h + 2 * geometry.pad_h),
        phase_w(ceil_div(geometry.out_w(), L) * L + (geometry.kw - 1) / geometry.stride_w + 1),
        plane(geometry.stride_w * rows * phase_w) {
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) offsets.push_back((j % g.stride_w * rows + i) * phase_w + j / g.stride_w);
  }

  // Phase ph's columns [lo, hi) hold the input columns m*sw + ph - pad_w inside [0, w).
  Range phase_columns(int64_t ph) const {
    const int64_t sw = g.stride_w, first = g.pad_w - ph;
    const int64_t lo = std::min(phase_w, first <= 0 ? int64_t{0} : ceil_div(first, sw));
    return {lo, std::max(lo, std::min(phase_w, ceil_div(g.w + g.pad_w - ph, sw)))};
  }

  void pad(const T* x, T* out) const {
    const int64_t sw = g.stride_w;
    std::fill(out, out + plane, T(0));  // one pass: cheaper than a few elements per row on small planes
    if (sw == 2) return pad_two_phases(x, out);
    for (int64_t ph = 0; ph < sw; ++ph) {
      const Range r = phase_columns(ph);
      for (int64_t ih = 0; ih < g.h; ++ih) {
        T* __restrict dst = out + (ph * rows + ih + g.pad_h) * phase_w;
        const T* __restrict src = x + ih * g.w + ph - g.pad_w;
        if (sw == 1) std::copy(src + r.lo, src + r.hi, dst + r.lo);
        else
          for (int64_t m = r.lo; m < r.hi; ++m) dst[m] = src[m * sw];
      }
    }
  }

  // pad at column stride 2: each input row read once, its pairs split into the two phases by one
  // loop whose loads the compiler de-interleaves with shuffles (the mirror of unpad's).
  void pad_two_phases(const T* x, T* out) const {
    const Range r0 = phase_columns(0), r1 = phase_columns(1);
    const int64_t lo = std::max(r0.lo, r1.lo), hi = std::min(r0.hi, r1.hi);
    for (int64_t ih = 0; ih < g.h; ++ih) {
      const T* row = x + ih * g.w - g.pad_w;  // phase ph's column m is row[2 * m + ph]
      T* __restrict even = out + (ih + g.pad_h) * phase_w;
      T* __restrict odd = even + rows * phase_w;
      for (int64_t m = r0.lo; m < std::min(lo, r0.hi); ++m) even[m] = row[2 * m];
      for (int64_t m = r1.lo; m < std::min(lo, r1.hi); ++m) odd[m] = row[2 * m + 1];
      const T* __restrict in = row;
      for (int64_t m = lo; m < hi; ++m) {
        even[m] = in[2 * m];
        odd[m] = in[2 * m + 1];
      }
      for (int64_t m = std::max(hi, r0.lo); m < r0.hi; ++m) even[m] = row[2 * m];
      for (int64_t m = std::max(hi, r1.lo); m < r1.hi; ++m) odd[m] = row[2 * m + 1];
    }
  }

  // Output rows [oh0, oh0 + RN), columns [ow0, ow0 + L) (cut at the plane's width) of one output
  // channel: bias + the sum over `cg` padded input planes (`in`, `plane` apart) and their taps w.
  // KH > 0 (stride_h 1 only): the kernel's height at compile time, so that each input row vector
  // is loaded once for the KH output rows that read it (RN + KH - 1 loads per kernel column, not
  // RN * KH), its KH weights held in registers.
  template <int64_t RN, int64_t KH>
  void tile(const T* in, int64_t cg, const T* w, T bias, int64_t oh0, int64_t ow0, T* y) const {
    V acc[RN];
#pragma GCC unroll 16
    for (int64_t r = 0; r < RN; ++r) acc[r] = V{} + bias;
    const int64_t row_step = g.stride_h * phase_w, area = g.kh * g.kw;
    in += oh0 * row_step + ow0;
    for (int64_t ci = 0; ci < cg; ++ci, in += plane, w += area) {
      if constexpr (KH > 0) {
        for (int64_t j = 0; j < g.kw; ++j) {
          T wv[KH];
          for (int64_t i = 0; i < KH; ++i) wv[i] = w[i * g.kw + j];
          const T* src = in + offsets[size_t(j)];
#pragma GCC unroll 24
          for (int64_t s = 0; s < RN + KH - 1; ++s) {
            const V xv = load_vector<V>(src + s * phase_w);
#pragma GCC unroll 8
            for (int64_t i = 0; i < KH; ++i)
              if (s - i >= 0 && s - i < RN) acc[s - i] += xv * wv[i];
          }
        }
      } else {
        for (int64_t t = 0; t < area; ++t) {
          const T wv = w[t];
          const T* src = in + offsets[size_t(t)];
#pragma GCC unroll 16
          for (int64_t r = 0; r < RN; ++r) acc[r] += load_vector<V>(src + r * row_step) * wv;
        }
      }
    }
    // A row narrower than a vector (the plane one column block wide) is stored whole unless the
    // vector would pass the plane's end: its extra lanes land on the next rows' first pixels,
    // which their own stores overwrite later (a plane is one unit, its rows stored in order).
    // Lane by lane, 14-wide rows cost more than the taps of a 3x3 depthwise convolution.
    const int64_t n = std::min(L, ow_n - ow0), end = oh_n * ow_n;
    for (int64_t r = 0; r < RN; ++r) {
      T* dst = y + (oh0 + r) * ow_n + ow0;
      if (n == L || (ow_n < L && (oh0 + r) * ow_n + L <= end)) std::memcpy(dst, &acc[r], sizeof(V));
      else
        for (int64_t l = 0; l < n; ++l) dst[l] = acc[r][l];
    }
  }

  template <int64_t RN, int64_t KH>
  void rows_tail(const T* in, int64_t cg, const T* w, T bias, int64_t oh0, int64_t n, int64_t ow0, T* y) const {
    if constexpr (RN > 0) {
      if (n == RN) return tile<RN, KH>(in, cg, w, bias, oh0, ow0, y);
      rows_tail<RN - 1, KH>(in, cg, w, bias, oh0, n, ow0, y);
    }
  }

  template <int64_t KH> void output_plane(const T* in, int64_t cg, const T* w, T bias, T* y) const {
    for (int64_t ow0 = 0; ow0 < ow_n; ow0 += L) {
      int64_t oh0 = 0;
      for (; oh0 + R <= oh_n; oh0 += R) tile<R, KH>(in, cg, w, bias, oh0, ow0, y);
      rows_tail<R - 1, KH>(in, cg, w, bias, oh0, oh_n - oh0, ow0, y);
    }
  }

  // One output plane from the group's padded input planes and its weights (cg x kh x kw).
  void output_plane(const T* in, int64_t cg, const T* w, T bias, T* y) const {
    if (g.stride_h == 1 && g.kh == 3) return output_plane<3>(in, cg, w, bias, y);
    if (g.stride_h == 1 && g.kh == 5) return output_plane<5>(in, cg, w, bias, y);
    if (g.stride_h == 1 && g.kh == 7) return output_plane<7>(in, cg, w, bias, y);
    output_plane<0>(in, cg, w, bias, y);
  }

  // The backward reads dy planes copied to rows of whole vectors (zeros past the plane's width).
  int64_t grad_w() const { return ceil_div(ow_n, L) * L; }

  void pad_grad(const T* dy, T* out) const {
    const int64_t gw = grad_w();
    for (int64_t oh = 0; oh < oh_n; ++oh) {
      std::copy(dy + oh * ow_n, dy + (oh + 1) * ow_n, out + oh * gw);
      std::fill(out + oh * gw + ow_n, out + (oh + 1) * gw, T(0));
    }
  }

  // The inverse of pad: input plane x from its padded phases (padding dropped).
  void unpad(const T* in, T* x) const {
    const int64_t sw = g.stride_w;
    for (int64_t ih = 0; ih < g.h; ++ih) {
      T* row = x + ih * g.w - g.pad_w;
      if (sw == 2) {  // both phases in one loop, whose interleaved stores vectorise
        const T* __restrict even = in + (ih + g.pad_h) * phase_w;
        const T* __restrict odd = even + rows * phase_w;
        const Range r0 = phase_columns(0), r1 = phase_columns(1);
        const int64_t lo = std::max(r0.lo, r1.lo), hi = std::min(r0.hi, r1.hi);
        for (int64_t m = r0.lo; m < std::min(lo, r0.hi); ++m) row[2 * m] = even[m];
        for (int64_t m = r1.lo; m < std::min(lo, r1.hi); ++m) row[2 * m + 1] = odd[m];
        T* __restrict out = row;
        for (int64_t m = lo; m < hi; ++m) {
          out[2 * m] = even[m];
          out[2 * m + 1] = odd[m];
        }
        for (int64_t m = std::max(hi, r0.lo); m < r0.hi; ++m) row[2 * m] = even[m];
        for (int64_t m = std::max(hi, r1.lo); m < r1.hi; ++m) row[2 * m + 1] = odd[m];
        continue;
      }
      for (int64_t ph = 0; ph < sw; ++ph) {
        const Range r = phase_columns(ph);
        const T* src = in + (ph * rows + ih + g.pad_h) * phase_w;
        for (int64_t m = r.lo; m < r.hi; ++m) row[m * sw + ph] = src[m];
      }
    }
  }

  // Padded phases `in` += w[t] * dy (a padded grad plane) at each tap t's positions: the
  // adjoint of the forward's reads. Tap by tap, so that no two updates of one vector are close.
  void add_input_grad(const T* dy, const T* w, T* in) const {
    const int64_t row_step = g.stride_h * phase_w, gw = grad_w();
    for (int64_t t = 0; t < g.kh * g.kw; ++t) {
      const T wv = w[t];
      T* base = in + offsets[size_t(t)];
      for (int64_t oh = 0; oh < oh_n; ++oh)
        for (int64_t ow0 = 0; ow0 < gw; ow0 += L) {
          T* at = base + oh * row_step + ow0;
          const V sum = load_vector<V>(at) + load_vector<V>(dy + oh * gw + ow0) * wv;
          std::memcpy(at, &sum, sizeof(V));
        }
    }
  }

  // sums[t0 + t] += the per-lane sums over pixels of dy * the input tap t0 + t reads, for TN
  // taps whose vector sums stay in registers while each dy vector is loaded once.
  template <int64_t TN> void weight_taps(const T* in, const T* dy, int64_t t0, V* sums) const {
    V acc[TN] = {};
    const int64_t row_step = g.stride_h * phase_w, gw = grad_w();
    const T* src[TN];
    for (int64_t t = 0; t < TN; ++t) src[t] = in + offsets[size_t(t0 + t)];
    for (int64_t oh = 0; oh < oh_n; ++oh)
      for (int64_t ow0 = 0; ow0 < gw; ow0 += L) {
        const V dv = load_vector<V>(dy + oh * gw + ow0);
        const int64_t at = oh * row_step + ow0;
#pragma GCC unroll 16
        for (int64_t t = 0; t < TN; ++t) acc[t] += load_vector<V>(src[t] + at) * dv;
      }
    for (int64_t t = 0; t < TN; ++t) sums[t0 + t] += acc[t];
  }

  template <int64_t TN> void weight_tail(const T* in, const T* dy, int64_t t0, int64_t n, V* sums) const {
    if constexpr (TN > 0) {
      if (n == TN) return weight_taps<TN>(in, dy, t0, sums);
      weight_tail<TN - 1>(in, dy, t0, n, sums);
    }
  }

  // sums[t] += the per-lane weight gradient of every tap from one padded input plane and padded
  // dy plane (the lanes are added once, at the end: per image they cost as much as the taps).
  void add_weight_grad(const T* in, const T* dy, V* sums) const {
    constexpr int64_t TB = 9;  // a 3x3 kernel's taps
    const int64_t area = g.kh * g.kw;
    int64_t t0 = 0;
    for (; t0 + TB <= area; t0 += TB) weight_taps<TB>(in, dy, t0, sums);
    weight_tail<TB - 1>(in, dy, t0, area - t0, sums);
  }
};

// Planes per task (kTaskMadds), for parallel_for over planes that each sum `channels` planes over
// every tap.
int64_t plane_grain(const Conv2dGeometry& g, int64_t channels) {
  const int64_t work = std::max<int64_t>(1, g.out_h() * g.out_w() * channels * g.kh * g.kw);
  return std::max<int64_t>(1, kTaskMadds / work);
}

}  // namespace

template <class T> void conv2d_forward_planes(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  const int64_t pixels = g.out_h() * g.out_w();
  // One unit: one output plane (b, k). A thread pads a group's input planes once for the run
  // of its units that read them (all kg outputs of the group, unless the run ends there).
  const PlaneConv<T> conv(g);
  const int64_t cg = g.c_per_group(), kg = g.k_per_group();
  parallel_for(g.n * g.k, plane_grain(g, g.c_per_group()), [&](int64_t u0, int64_t u1) {
    alloc::Scratch<T> planes(static_cast<size_t>(cg * conv.plane));
    int64_t padded = -1;  // the (image, group) whose planes are in `planes`
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t k = u % g.k, group = u / kg;  // group = b * groups + k / kg
      if (group != padded) {
        for (int64_t ci = 0; ci < cg; ++ci)
          conv.pad(x + (group * cg + ci) * g.h * g.w, planes.data() + ci * conv.plane);
        padded = group;
      }
      conv.output_plane(planes.data(), cg, w + k * cg * g.kh * g.kw, bias != nullptr ? bias[k] : T(0), y + u * pixels);
    }
  });
}

template <class T>
void conv2d_backward_planes(const Conv2dGeometry& g, const T* x, const T* w, const T* dy, T* dx, T* dw, T* dbias) {
  const int64_t pixels = g.out_h() * g.out_w();
  const PlaneConv<T> conv(g);
  const int64_t cg = g.c_per_group(), kg = g.k_per_group(), area = g.kh * g.kw;
  const int64_t grad_plane = g.out_h() * conv.grad_w();
  if (dx != nullptr)  // one unit: one input channel of one image
    parallel_for(g.n * g.c, plane_grain(g, g.k_per_group()), [&](int64_t u0, int64_t u1) {
      alloc::Scratch<T> in(static_cast<size_t>(conv.plane)), grad(static_cast<size_t>(grad_plane));
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t b = u / g.c, c = u % g.c, q = c / cg;
        std::fill(in.data(), in.data() + conv.plane, T(0));
        for (int64_t k = q * kg; k < (q + 1) * kg; ++k) {
          conv.pad_grad(dy + (b * g.k + k) * pixels, grad.data());
          conv.add_input_grad(grad.data(), w + (k * cg + c % cg) * area, in.data());
        }
        conv.unpad(in.data(), dx + u * g.h * g.w);
      }
    });
  if (dw != nullptr || dbias != nullptr)  // one unit: one output channel over the whole batch, in order
    parallel_for(g.k, 1, [&](int64_t k0, int64_t k1) {
      using V = typename PlaneConv<T>::V;
      alloc::Scratch<T> in(static_cast<size_t>(conv.plane)), grad(static_cast<size_t>(grad_plane));
      std::vector<V> sums(static_cast<size_t>(cg * area));
      for (int64_t k = k0; k < k1; ++k) {
        std::fill(sums.begin(), sums.end(), V{});
        Acc bias_sum = 0;
        for (int64_t b = 0; b < g.n; ++b) {
          const T* dyk = dy + (b * g.k + k) * pixels;
          if (dbias != nullptr) bias_sum += sum_in_lanes(dyk, pixels);
          if (dw == nullptr) continue;
          conv.pad_grad(dyk, grad.data());
          for (int64_t ci = 0; ci < cg; ++ci) {
            conv.pad(x + (b * g.c + k / kg * cg + ci) * g.h * g.w, in.data());
            conv.add_weight_grad(in.data(), grad.data(), sums.data() + ci * area);
          }
        }
        if (dbias != nullptr) dbias[k] = static_cast<T>(bias_sum);
        if (dw != nullptr)
          for (int64_t t = 0; t < cg * area; ++t) {
            Acc sum = 0;
            for (int64_t l = 0; l < PlaneConv<T>::L; ++l) sum += sums[size_t(t)][l];
            dw[k * cg * area + t] = static_cast<T>(sum);
          }
      }
    });
}

template void conv2d_forward_planes<float>(const Conv2dGeometry&, const float*, const float*, const float*, float*);
template void conv2d_forward_planes<double>(const Conv2dGeometry&, const double*, const double*, const double*,
                                            double*);
template void conv2d_backward_planes<float>(const Conv2dGeometry&, const float*, const float*, const float*, float*,
                                            float*, float*);
template void conv2d_backward_planes<double>(const Conv2dGeometry&, const double*, const double*, const double*,
                                             double*, double*, double*);

}  // namespace nexus::ops::cpu::NX_CPU_VARIANT
