// conv2d on contiguous NCHW buffers: a register-blocked direct kernel, im2col + BLAS gemm, or
// plane kernels for depthwise, grouped and few-channel convolutions.
//
// The im2col form is a gemm: y[k, oh*ow] = w[k, c*kh*kw] * col[c*kh*kw, oh*ow], where col holds,
// for every kernel tap, the input pixel each output position reads (0 in the padding); a group
// of images shares one gemm with their columns side by side. Backward reverses it: dcol = w^T *
// dy scattered back by col2im gives dx, and dw = dy * col^T summed over the batch.
#include "ops/cpu/kernels.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "codegen/kernel_prelude.h"  // kern::relu, the op the epilogues apply
#include "ops/blas.h"
#include "ops/cpu/conv_common.h"
#include "tensor/allocator.h"

// The direct kernels' lambdas return GCC vectors wider than the baseline's registers; GCC notes
// that their ABI differs between variants, which is moot for functions local to this file.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace nexus::ops::cpu::NX_CPU_VARIANT {
namespace {

// The output positions [lo, hi) along one axis whose input index o*stride - pad + tap lies
// inside [0, in). Outside that range the tap reads padding.
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

// The forward runs direct (conv2d_forward_direct) except where BLAS was measured faster (Zen 4,
// 2 threads, vs im2col + gemm): pointwise convolutions of 64 channels or more, whose im2col is
// the input itself, and 4096 taps or more (512 channels of 3x3; 256 channels ran faster direct).
bool direct_forward(const Conv2dGeometry& g, const ConvSizes& s) {
  return s.taps < 4096 && !(g.kh * g.kw == 1 && g.c >= 64);
}

// The weight gradient runs direct (conv_backward_weight_direct) below 4096 taps, as the forward
// does: measured faster than im2col + gemm at 2304 taps and slower at 4608 (Zen 4, 2 threads).
bool direct_dw(const Conv2dGeometry&, const ConvSizes& s) { return s.taps < 4096; }

// A padded conv runs the unpadded kernels on a zero-padded copy of the image (c planes of
// (h + 2*pad_h) x (w + 2*pad_w)); returns that copy's geometry.
Conv2dGeometry unpadded(const Conv2dGeometry& g) {
  Conv2dGeometry p = g;
  p.h += 2 * g.pad_h;
  p.w += 2 * g.pad_w;
  p.pad_h = p.pad_w = 0;
  return p;
}

// One image zero-padded into `padded` (or x itself when g has no padding).
template <class T> const T* pad_image(const Conv2dGeometry& g, const T* x, T* padded) {
  if (g.pad_h == 0 && g.pad_w == 0) return x;
  pad_rows(g, x, 0, g.h + 2 * g.pad_h, padded);
  return padded;
}

// ---- the direct forward kernel ------------------------------------------------------------------
//
// A block of KV native vectors of output channels (KB = KV * lanes channels) times R consecutive
// output pixels: the R x KV channel sums stay in registers across all c*kh*kw taps,
// each tap one broadcast input pixel times the tap's KB weights. This file is built with
// contraction on (CMakeLists.txt), so that is one fused multiply-add, as in a BLAS kernel. R is
// what the variant's registers hold: kAccRegs[KV] accumulators, KV weights and one broadcast.
// With 32 registers, one vector of channels takes 16 pixels, not 24 (measured faster, Zen 4).

template <class T, int64_t KV> struct DirectConv {
  typedef T V __attribute__((vector_size(kVecBytes)));  // (a `using` would drop the attribute)
  static constexpr int64_t kLanes = kVecBytes / sizeof(T), KB = KV * kLanes, R = kAccRegs[KV] / KV;

  const Conv2dGeometry& g;  // the zero-padded image's geometry (no padding left)
  const T* wt;              // [k block][tap][KB], zero beyond k
  const T* bias;            // [k block * KB], zero beyond k or without a bias
  int64_t taps, pixels;
  Epilogue<T> ep;  // applied as the block stores (res: the image's residual, when ep has one)

  static V load(const T* p) { return load_vector<V>(p); }

  // One kernel column j of one input row: acc[r] += src[pixel r's window + j] * w's KB weights.
  template <int64_t RN, bool ROW> [[gnu::always_inline]] static void tap(V (&acc)[RN][KV], const int64_t (&at)[RN],
                                                                         const T* src, int64_t j, const T* w) {
    V wv[KV];
    for (int64_t v = 0; v < KV; ++v) wv[v] = load(w + v * kLanes);
#pragma GCC unroll 24
    for (int64_t r = 0; r < RN; ++r) {
      const T xv = ROW ? src[at[0] + r + j] : src[at[r] + j];
      for (int64_t v = 0; v < KV; ++v) acc[r][v] += xv * wv[v];
    }
  }

  // y (one image's output) for channel block kb and output pixels [p0, p0 + RN) in row-major
  // order (a block may span rows: narrow outputs such as 8x8 fill whole blocks). KW is the kernel
  // width when the compiler should unroll it (3), else 0 (g.kw at run time). EPI: the epilogue,
  // fixed at compile time (kAdd | kRelu bits) so that the stores stay a plain unrolled transpose:
  // ReLU on the sums' vectors, the residual (res, this image's) added as each row is stored.
  static constexpr int kAdd = 1, kRelu = 2;
  // ROW: the block lies in one output row at column stride 1, so pixel r reads r columns after
  // pixel 0 (one address and constant offsets, where RN addresses would not fit the registers).
  template <int64_t RN, int64_t KW, int EPI = 0, bool ROW = false>
  void block(const T* x, int64_t kb, int64_t p0, T* y, const T* res = nullptr) const {
    int64_t at[RN];  // where pixel p0 + r's window starts in x
    const int64_t ow_n = g.out_w();
    for (int64_t r = 0, oh = p0 / ow_n, ow = p0 % ow_n; r < RN; ++r) {  // one division, not RN
      at[r] = oh * g.stride_h * g.w + ow * g.stride_w;
      if (++ow == ow_n) ow = 0, ++oh;
    }
    V acc[RN][KV];
    for (int64_t v = 0; v < KV; ++v) {
      const V b = load(bias + kb * KB + v * kLanes);
#pragma GCC unroll 24
      for (int64_t r = 0; r < RN; ++r) acc[r][v] = b;
    }
    const T* w = wt + kb * taps * KB;
    for (int64_t ci = 0; ci < g.c; ++ci) {
      for (int64_t i = 0; i < g.kh; ++i) {
        const T* src = x + (ci * g.h + i) * g.w;
        if constexpr (KW > 0) {
#pragma GCC unroll 4
          for (int64_t j = 0; j < KW; ++j, w += KB) tap<RN, ROW>(acc, at, src, j, w);
        } else {
          // Not unrolled. Rolled, GCC carries each input pixel to the next column's block in a
          // register (pixel r at column j + 1 is pixel r + 1 at column j): a load per column
          // instead of one per multiply-add, which is what bounds this loop. Unrolled by 4 it
          // spilled sums instead (2x4 kernel, 32 -> 48 channels, one thread: 182 GFLOP/s rolled,
          // 152 unrolled; 167 rolled with a broadcast load per multiply-add).
#pragma GCC unroll 1
          for (int64_t j = 0; j < g.kw; ++j, w += KB) tap<RN, ROW>(acc, at, src, j, w);
        }
      }
    }
    if constexpr (EPI == kRelu) {  // relu keeps NaN, as the op: v > 0 ? v : (v != v ? v : 0)
#pragma GCC unroll 24
      for (int64_t r = 0; r < RN; ++r)
        for (int64_t v = 0; v < KV; ++v)
          acc[r][v] = acc[r][v] > 0 ? acc[r][v] : (acc[r][v] != acc[r][v] ? acc[r][v] : 0);
    }
    T out[RN][KB];
    std::memcpy(out, acc, sizeof(out));
    const int64_t k0 = kb * KB, kn = std::min(KB, g.k - k0);
    T* dst = y + k0 * pixels + p0;
    const T* rs = res + (k0 * pixels + p0);
    for (int64_t k = 0; k < kn; ++k, dst += pixels)
      for (int64_t r = 0; r < RN; ++r) dst[r] = out[r][k];
    if constexpr ((EPI & kAdd) != 0) {  // then each row, now contiguous: + its residual (and relu)
      dst = y + k0 * pixels + p0;
      for (int64_t k = 0; k < kn; ++k, dst += pixels, rs += pixels)
        for (int64_t r = 0; r < RN; ++r) {
          const T v = dst[r] + rs[r];
          dst[r] = (EPI & kRelu) != 0 ? kern::relu(v) : v;
        }
    }
  }

  // n < R pixels (the end of an image or of a row), with the block of exactly that width (no
  // epilogue).
  template <int64_t RN, int64_t KW, bool ROW> void tail(const T* x, int64_t kb, int64_t p0, int64_t n, T* y) const {
    if constexpr (RN > 0) {
      if (n == RN) return block<RN, KW, 0, ROW>(x, kb, p0, y);
      tail<RN - 1, KW, ROW>(x, kb, p0, n, y);
    }
  }
  template <int64_t KW> void tail(const T* x, int64_t kb, int64_t p0, int64_t n, T* y) const {
    if (g.stride_w == 1 && p0 % g.out_w() + n <= g.out_w()) return tail<R - 1, KW, true>(x, kb, p0, n, y);
    tail<R - 1, KW, false>(x, kb, p0, n, y);
  }

  // More than R/2 pixels of one row (the blocks of a row cut into nearly equal ones), with the
  // epilogue as they store, as a full block.
  template <int64_t RN, int64_t KW>
  void row_part(int epi, const T* x, int64_t kb, int64_t p0, int64_t n, T* y, const T* res) const {
    if constexpr (RN > R / 2) {
      if (n == RN) return epi_block<RN, KW, true>(epi, x, kb, p0, y, res);
      row_part<RN - 1, KW>(epi, x, kb, p0, n, y, res);
    }
  }

  // Pixels [p0, p0 + n) of channel block kb (n <= R); res: this image's residual (or none).
  void pixel_block(const T* x, int64_t kb, int64_t p0, int64_t n, T* y, const T* res) const {
    const int epi = (ep.residual != nullptr ? kAdd : 0) | (ep.relu ? kRelu : 0);
    if (n == R) {
      if (g.kw == 3) return full_block<3>(epi, x, kb, p0, y, res);
      return full_block<0>(epi, x, kb, p0, y, res);
    }
    if (n > R / 2 && g.stride_w == 1 && p0 % g.out_w() + n <= g.out_w())
      return g.kw == 3 ? row_part<R - 1, 3>(epi, x, kb, p0, n, y, res) : row_part<R - 1, 0>(epi, x, kb, p0, n, y, res);
    g.kw == 3 ? tail<3>(x, kb, p0, n, y) : tail<0>(x, kb, p0, n, y);
    if (!ep.any()) return;  // then the epilogue over them: one such block per image (or row), a plain loop
    const int64_t k0 = kb * KB, kn = std::min(KB, g.k - k0);
    for (int64_t k = k0; k < k0 + kn; ++k)
      for (int64_t p = p0; p < p0 + n; ++p)
        y[k * pixels + p] = ep(y[k * pixels + p], res != nullptr ? res[k * pixels + p] : T(0));
  }

  template <int64_t KW> void full_block(int epi, const T* x, int64_t kb, int64_t p0, T* y, const T* res) const {
    if (g.stride_w == 1 && p0 % g.out_w() + R <= g.out_w()) return epi_block<R, KW, true>(epi, x, kb, p0, y, res);
    epi_block<R, KW, false>(epi, x, kb, p0, y, res);
  }
  template <int64_t RN, int64_t KW, bool ROW>
  void epi_block(int epi, const T* x, int64_t kb, int64_t p0, T* y, const T* res) const {
    switch (epi) {
      case 0: return block<RN, KW, 0, ROW>(x, kb, p0, y);
      case kRelu: return block<RN, KW, kRelu, ROW>(x, kb, p0, y);
      case kAdd: return block<RN, KW, kAdd, ROW>(x, kb, p0, y, res);
      default: return block<RN, KW, kAdd | kRelu, ROW>(x, kb, p0, y, res);
    }
  }

  // Rows of 8 or 16 output pixels at column stride 1, with two vectors of channels: R-pixel blocks
  // (12) would mostly straddle two rows and keep an address per pixel; blocks of 8, one row's
  // each, read at constant offsets. Where the registers hold more than 8 pixels' sums.
  static constexpr int64_t kRowBlock = 8;
  static bool row_blocks(const Conv2dGeometry& gp) {
    return KV == 2 && R > kRowBlock && gp.stride_w == 1 && (gp.out_w() == 8 || gp.out_w() == 16);
  }
  // Pixels [p0, p0 + 8) of channel block kb, in one output row (row_blocks).
  void row_block(const T* x, int64_t kb, int64_t p0, T* y, const T* res) const {
    const int epi = (ep.residual != nullptr ? kAdd : 0) | (ep.relu ? kRelu : 0);
    if (g.kw == 3) return epi_block<kRowBlock, 3, true>(epi, x, kb, p0, y, res);
    epi_block<kRowBlock, 0, true>(epi, x, kb, p0, y, res);
  }
};

// How many vectors of output channels (KV) the direct kernels block together, then calls
// fn(std::integral_constant<int64_t, KV>{}): the fewest empty lanes in the last block, and on a
// tie two vectors (12 pixels a block, a broadcast per two multiply-adds), then three (8 pixels, a
// broadcast per three), then one (a broadcast per multiply-add). 48 channels of 16 lanes: one full
// block of three, where two vectors leave half a block empty and one vector loads the most.
template <class T, class Fn> void with_channel_vectors(int64_t k, const Fn& fn) {
  auto padded = [k](int64_t kv) { return ceil_div(k, kv * DirectConv<T, 1>::KB) * kv * DirectConv<T, 1>::KB; };
  int64_t kv = 2;
  for (const int64_t other : {int64_t{3}, int64_t{1}})
    if (kAccRegs[other] > 0 && padded(other) < padded(kv)) kv = other;
  if constexpr (kAccRegs[3] > 0) {
    if (kv == 3) return fn(std::integral_constant<int64_t, 3>{});
  }
  if (kv == 1) return fn(std::integral_constant<int64_t, 1>{});
  fn(std::integral_constant<int64_t, 2>{});
}

// fn(kb, t, v) for every channel block kb, tap t and lane v: the traversal of a transpose between
// [k][tap] and [k block][tap][lane] (the direct kernels' weight layout), in tiles of 16 taps whose
// rows of both layouts stay in L1 (column by column, every access of a large w is a cache miss:
// 50 us for 64x576 weights, as long as a 1-pixel convolution), split over the pool when there
// are many (a large w is a sizeable share of a batch-1 convolution).
template <class Fn> void for_block_tiles(int64_t kblocks, int64_t taps, int64_t lanes, const Fn& fn) {
  const int64_t tiles = ceil_div(taps, 16);
  parallel_for(kblocks * tiles, std::max<int64_t>(1, kElementwiseGrain / (16 * lanes)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t kb = i / tiles, t0 = i % tiles * 16, t1 = std::min(taps, t0 + 16);
      for (int64_t v = 0; v < lanes; ++v)
        for (int64_t t = t0; t < t1; ++t) fn(kb, t, v);
    }
  });
}

// wt[kb][t][v] = w[kb * KB + v][t] (zero beyond k): the direct kernels' weight layout, filled in
// tiles of 16 taps so that a tile's KB destination rows stay in L1 while each source row is read
// in order. Plain locals, not captured references: a store through wt may not alias the sizes.
template <class T> void pack_channel_blocks(const T* w, const int64_t k, const int64_t taps, const int64_t KB, T* wt) {
  const int64_t kblocks = ceil_div(k, KB);
  parallel_for(kblocks, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, taps * KB)),
               [=](int64_t b0, int64_t b1) {
                 for (int64_t kb = b0; kb < b1; ++kb) {
                   T* block = wt + kb * taps * KB;
                   const int64_t kn = std::min(KB, k - kb * KB);
                   if (kn < KB) std::fill(block, block + taps * KB, T(0));
                   for (int64_t t0 = 0; t0 < taps; t0 += 16) {
                     const int64_t t1 = std::min(taps, t0 + 16);
                     for (int64_t v = 0; v < kn; ++v) {
                       const T* __restrict src = w + (kb * KB + v) * taps;
                       T* __restrict dst = block + v;
                       for (int64_t t = t0; t < t1; ++t) dst[t * KB] = src[t];
                     }
                   }
                 }
               });
}

// The direct forward over the pool: one unit of work is one block of R output pixels of one
// channel block of one image, units ordered image by image, then pixel block by pixel block. KV = 1
// (one vector of channels) when k fits in it.
// The weights are packed on every call, or once for a constant storage (constant_w).
template <class T, int64_t KV> void conv2d_forward_direct(const Conv2dGeometry& g, const ConvSizes& s, const T* x,
                                                          const T* w, const T* bias, T* y, Storage* constant_w,
                                                          const Epilogue<T>& ep) {
  using Kernel = DirectConv<T, KV>;
  constexpr int64_t KB = Kernel::KB, R = Kernel::R;
  const Conv2dGeometry gp = unpadded(g);
  const bool rows = Kernel::row_blocks(gp);
  const int64_t width = rows ? Kernel::kRowBlock : R, ow = gp.out_w();  // pixels per block
  // Rows wider than a block but not a multiple of it (25 at R 8) are cut row by row into nearly
  // equal blocks (6, 6, 6, 7): a block inside one row reads its pixels at constant offsets from
  // one address, where one straddling two rows keeps an address per pixel (more than the
  // registers hold: a 2x4 kernel of 32 -> 48 channels ran at 58 % of the row blocks' speed), and
  // R pixels then the rest left a last block of one pixel that cost nearly as much as a full one
  // (that kernel's forward 0.342 -> 0.330 ms).
  const int64_t per_row = !rows && gp.stride_w == 1 && ow > R && ow % R != 0 ? ceil_div(ow, R) : 0;
  auto start = [&](int64_t q) { return per_row > 0 ? q / per_row * ow + q % per_row * ow / per_row : q * width; };
  const int64_t kblocks = ceil_div(g.k, KB),
                pixel_blocks = per_row > 0 ? gp.out_h() * per_row : ceil_div(s.pixels, width);
  const PreparedWeights<T> packed(constant_w, w, {'c', int64_t(sizeof(T)), KB, g.k, s.taps}, kblocks * s.taps * KB,
                                  [&](T* out) { pack_channel_blocks(w, g.k, s.taps, KB, out); });
  alloc::Scratch<T> bias_kb(static_cast<size_t>(kblocks * KB));
  for (int64_t k = 0; k < kblocks * KB; ++k) bias_kb.data()[k] = bias != nullptr && k < g.k ? bias[k] : T(0);
  const Kernel kernel{gp, packed.data(), bias_kb.data(), s.taps, s.pixels, ep};
  const int64_t per_image = kblocks * pixel_blocks, unit_work = width * s.taps * KB;
  const int64_t grain = std::max<int64_t>(1, kTaskMadds / std::max<int64_t>(unit_work, 1));
  // Every channel block of a pixel block runs before the next pixel block, so a thread's run of
  // an image is a band of output rows and it pads only the input rows they read: at batch 1 each
  // thread pads its share, not the whole image (measured 6-11 % of a batch-1 convolution of 16
  // or 32 channels on 2 threads; no change at batch 8 and 64).
  const bool pad = g.pad_h != 0 || g.pad_w != 0;
  parallel_for(g.n * per_image, grain, [&](int64_t u0, int64_t u1) {
    alloc::Scratch<T> xp(static_cast<size_t>(pad ? gp.c * gp.h * gp.w : 0));
    int64_t padded_b = -1;
    const T* xb = nullptr;
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t b = u / per_image, q = u % per_image / kblocks, kb = u % kblocks;
      if (b != padded_b) {
        padded_b = b;
        xb = x + b * s.in_img;
        if (pad) {  // the rows read by output pixels [first block's start, last block's end)
          const int64_t q_last = (std::min(u1, (b + 1) * per_image) - 1) % per_image / kblocks;
          const int64_t oh0 = start(q) / ow, oh1 = (std::min(s.pixels, start(q_last) + width) - 1) / ow;
          pad_rows(g, xb, oh0 * g.stride_h, std::min(gp.h, oh1 * g.stride_h + g.kh), xp.data());
          xb = xp.data();
        }
      }
      const T* res = ep.residual != nullptr ? ep.residual + b * s.out_img : nullptr;
      const int64_t p0 = start(q), end = per_row > 0 ? q / per_row * ow + (q % per_row + 1) * ow / per_row : s.pixels;
      if (rows) kernel.row_block(xb, kb, p0, y + b * s.out_img, res);
      else kernel.pixel_block(xb, kb, p0, std::min(R, end - p0), y + b * s.out_img, res);
    }
  });
}

// ---- pointwise convolutions of few input channels --------------------------------------------
//
// A 1x1 convolution without padding, y[k][p] = bias[k] + the sum over c of w[k][c] * x[c][p's
// pixel], has as many taps as input channels: 16 in a ResNet's strided projection (16 -> 32
// channels at stride 2). With so few taps the direct kernel's blocks spent about as long storing
// their pixel-major sums (a transpose) as making them. Here the sums run along pixels: a block of
// KR output channels times PV vectors of consecutive output pixels, each channel one vector load
// per pixel vector and KR broadcast weights, stored as whole vectors into the NCHW output. A unit
// of work gathers its run of sampled input pixels into a contiguous buffer once (zero-extended to
// whole vectors) and runs every channel block over it. Each sum starts from the bias and adds the
// channels in order with one fused multiply-add each, as the direct kernel's: the same bits.

// Pixels a unit gathers (a multiple of every variant's pixel blocks).
constexpr int64_t kPointwisePixels = 128;

template <class T> struct Pointwise {
  typedef T V __attribute__((vector_size(kVecBytes)));
  static constexpr int64_t kLanes = kVecBytes / sizeof(T), PV = 2, KR = kAccRegs[1] / PV;

  const Conv2dGeometry& g;
  const T* w;     // [k][c]
  const T* bias;  // [k], or null
  int64_t pixels;
  Epilogue<T> ep;

  // xs[c][i] = x[c][pixel p0 + i] for i < n, 0 up to `width` (one image's x).
  void gather(const T* x, int64_t p0, int64_t n, int64_t width, T* xs) const {
    const int64_t ow_n = g.out_w(), plane = g.h * g.w;
    for (int64_t c = 0; c < g.c; ++c) {
      T* dst = xs + c * width;
      for (int64_t i = 0, oh = p0 / ow_n, ow = p0 % ow_n; i < n;) {  // row by row
        const T* src = x + c * plane + oh * g.stride_h * g.w;
        const int64_t m = std::min(n - i, ow_n - ow);
        if (g.stride_w == 1)
          copy_bytes(reinterpret_cast<char*>(dst + i), reinterpret_cast<const char*>(src + ow), m * int64_t(sizeof(T)));
        else
          for (int64_t j = 0; j < m; ++j) dst[i + j] = src[(ow + j) * g.stride_w];
        i += m, ow = 0, ++oh;
      }
      std::fill(dst + n, dst + width, T(0));
    }
  }

  // y[k0 + kr][p0 + v*lanes ...] for kr < KRN, v < PVN (n of those pixels stored: all of them
  // but in a run's last vector) from xs's columns [i0, ...) (rows `width` apart).
  template <int64_t KRN, int64_t PVN>
  void block(const T* xs, int64_t width, int64_t i0, int64_t k0, int64_t p0, int64_t n, T* y, const T* res) const {
    V acc[KRN][PVN];
    for (int64_t kr = 0; kr < KRN; ++kr) {
      const T b = bias != nullptr ? bias[k0 + kr] : T(0);
      V bv;
      for (int64_t l = 0; l < kLanes; ++l) bv[l] = b;  // b itself: 0 + b would turn a -0 bias into +0
      for (int64_t v = 0; v < PVN; ++v) acc[kr][v] = bv;
    }
    const T* wk = w + k0 * g.c;
    for (int64_t c = 0; c < g.c; ++c) {
      V xv[PVN];
      for (int64_t v = 0; v < PVN; ++v) xv[v] = load_vector<V>(xs + c * width + i0 + v * kLanes);
#pragma GCC unroll 8
      for (int64_t kr = 0; kr < KRN; ++kr) {
        const T wv = wk[kr * g.c + c];
        for (int64_t v = 0; v < PVN; ++v) acc[kr][v] += wv * xv[v];
      }
    }
    for (int64_t kr = 0; kr < KRN; ++kr)
      for (int64_t v = 0; v < PVN; ++v) {
        const int64_t at = (k0 + kr) * pixels + p0 + v * kLanes, m = std::min(kLanes, n - v * kLanes);
        V out = acc[kr][v];
        if (m == kLanes) {
          if (ep.residual != nullptr) out = out + load_vector<V>(res + at);
          if (ep.relu) out = out > 0 ? out : (out != out ? out : V{});  // as kern::relu: NaN stays
          std::memcpy(y + at, &out, sizeof(V));
        } else {
          T part[kLanes];
          std::memcpy(part, &out, sizeof(V));
          for (int64_t i = 0; i < m; ++i) y[at + i] = ep(part[i], res != nullptr ? res[at + i] : T(0));
        }
      }
  }

  // Output channels [k0, k0 + KRN) over a unit's n pixels gathered in xs: pairs of vectors,
  // then one.
  template <int64_t KRN>
  void channels(const T* xs, int64_t width, int64_t k0, int64_t p0, int64_t n, T* y, const T* res) const {
    int64_t i = 0;
    for (; i + PV * kLanes <= n; i += PV * kLanes) block<KRN, PV>(xs, width, i, k0, p0 + i, PV * kLanes, y, res);
    for (; i < n; i += kLanes) block<KRN, 1>(xs, width, i, k0, p0 + i, std::min(kLanes, n - i), y, res);
  }
  // KRN = the rest of k below KR, as a template argument.
  template <int64_t KRN>
  void rest(int64_t left, const T* xs, int64_t width, int64_t k0, int64_t p0, int64_t n, T* y, const T* res) const {
    if constexpr (KRN > 0) {
      if (left == KRN) return channels<KRN>(xs, width, k0, p0, n, y, res);
      rest<KRN - 1>(left, xs, width, k0, p0, n, y, res);
    }
  }

  void run(const T* x, T* y) const {
    const int64_t in_img = g.c * g.h * g.w, out_img = g.k * pixels;
    const int64_t per_image = ceil_div(pixels, kPointwisePixels);
    const int64_t grain = std::max<int64_t>(1, kTaskMadds / std::max<int64_t>(1, kPointwisePixels * g.c * g.k));
    parallel_for(g.n * per_image, grain, [&](int64_t u0, int64_t u1) {
      alloc::Scratch<T> xs(static_cast<size_t>(g.c * kPointwisePixels));
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t b = u / per_image, p0 = u % per_image * kPointwisePixels;
        const int64_t n = std::min(kPointwisePixels, pixels - p0);
        gather(x + b * in_img, p0, n, kPointwisePixels, xs.data());
        T* yb = y + b * out_img;
        const T* res = ep.residual != nullptr ? ep.residual + b * out_img : nullptr;
        int64_t k0 = 0;
        for (; k0 + KR <= g.k; k0 += KR) channels<KR>(xs.data(), kPointwisePixels, k0, p0, n, yb, res);
        rest<KR - 1>(g.k - k0, xs.data(), kPointwisePixels, k0, p0, n, yb, res);
      }
    });
  }
};

bool pointwise_forward(const Conv2dGeometry& g) {
  return g.groups == 1 && g.kh == 1 && g.kw == 1 && g.pad_h == 0 && g.pad_w == 0;
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

// ---- grouped convolutions, and convolutions of few output channels --------------------------------
//
// A convolution or group with few output channels (depthwise: one; LeNet's first layer: six)
// runs on plane kernels, one output (or input) channel's plane at a time, vectorised along the
// output row: the direct kernel's vectors of output channels would be mostly empty there. Wider
// groups each run as an ungrouped convolution of their channels, gathered into contiguous
// buffers (a copy of the input and output, small beside the convolution itself when a group has
// 8 or more output channels).
constexpr int64_t kPlaneMaxChannels = 8;  // plane kernels below this many output channels per group

bool plane_kernels(const Conv2dGeometry& g) { return g.k_per_group() < kPlaneMaxChannels; }

// The ungrouped geometry of one group's channels.
Conv2dGeometry one_group(const Conv2dGeometry& g) {
  Conv2dGeometry s = g;
  s.c = g.c_per_group();
  s.k = g.k_per_group();
  s.groups = 1;
  return s;
}

// Channels [q*per, (q+1)*per) of each of the n images of `channels` planes of `plane` elements,
// copied to (gather) or from (scatter) a contiguous (n, per, plane) buffer.
template <class T> void move_channels(bool gather, const T* from, int64_t n, int64_t channels, int64_t per,
                                      int64_t plane, int64_t q, T* to) {
  for_images(0, n, [&](int64_t b) {
    const int64_t all = (b * channels + q * per) * plane, own = b * per * plane;
    std::copy(from + (gather ? all : own), from + (gather ? all : own) + per * plane, to + (gather ? own : all));
  });
}

}  // namespace

// ---- conv2d -------------------------------------------------------------------------------------

// Groups are independent forward, so they run in parallel, each task with its own scratch (the
// gemms inside then run inline). A single group (one huge image) keeps the pool for its gemm.
template <class T> void conv2d_forward(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y,
                                       Storage* constant_w = nullptr, const Epilogue<T>& ep = {});

template <class T> void conv2d_forward_grouped(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  const int64_t pixels = g.out_h() * g.out_w();
  if (plane_kernels(g)) return conv2d_forward_planes(g, x, w, bias, y);
  const Conv2dGeometry s = one_group(g);
  alloc::Scratch<T> xg(static_cast<size_t>(g.n * s.c * g.h * g.w)), yg(static_cast<size_t>(g.n * s.k * pixels));
  for (int64_t q = 0; q < g.groups; ++q) {
    move_channels(true, x, g.n, g.c, s.c, g.h * g.w, q, xg.data());
    conv2d_forward(s, xg.data(), w + q * s.k * s.c * g.kh * g.kw, bias != nullptr ? bias + q * s.k : nullptr,
                   yg.data());
    move_channels(false, yg.data(), g.n, g.k, s.k, pixels, q, y);
  }
}

// The paths other than the direct kernel: plane kernels, groups, pointwise, im2col + gemm.
template <class T>
void conv2d_forward_other(const Conv2dGeometry& g, const ConvSizes& s, const T* x, const T* w, const T* bias, T* y);

// constant_w: the storage of w when it is constant (its packed form is then kept beside it).
// ep: applied as the direct kernel stores, or over y after the other paths.
template <class T> void conv2d_forward(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y,
                                       Storage* constant_w, const Epilogue<T>& ep) {
  const ConvSizes s = conv_sizes(g);
  if constexpr (std::is_same_v<T, float>) {
    if (winograd_forward(g)) return conv2d_forward_winograd(g, x, w, bias, y, constant_w, ep);
  }
  if (g.groups == 1 && !plane_kernels(g) && direct_forward(g, s)) {
    if (pointwise_forward(g)) return Pointwise<T>{g, w, bias, s.pixels, ep}.run(x, y);
    return with_channel_vectors<T>(
        g.k, [&](auto kv) { conv2d_forward_direct<T, decltype(kv)::value>(g, s, x, w, bias, y, constant_w, ep); });
  }
  conv2d_forward_other(g, s, x, w, bias, y);
  ep.apply(y, g.n * s.out_img);
}

template <class T>
void conv2d_forward_other(const Conv2dGeometry& g, const ConvSizes& s, const T* x, const T* w, const T* bias, T* y) {
  if (g.groups > 1 || plane_kernels(g)) return conv2d_forward_grouped(g, x, w, bias, y);
  if (s.taps == g.c && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0) {
    // pointwise: each image's (c, pixels) is its own im2col, y = w x per image, no copies
    for_images(0, g.n, [&](int64_t b) {
      T* yb = y + b * s.out_img;
      gemm<T>(false, false, g.k, s.pixels, g.c, T(1), w, g.c, x + b * s.in_img, s.pixels, T(0), yb, s.pixels);
      for (int64_t k = 0; k < g.k && bias != nullptr; ++k)
        for (int64_t p = 0; p < s.pixels; ++p) yb[k * s.pixels + p] += bias[k];
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

// The weight gradient of one zero-padded image for channel block kb, direct: dwt[tap][0..KB) +=
// the sum over pixels of x[pixel + tap] * dyt[pixel][0..KB), for a block of TB taps at a time,
// whose TB x KV sums stay in registers while each pixel's dy vectors are loaded once.
// dyt: the block's dy transposed to [pixel][KB] (zero beyond k).
template <class T, int64_t KV> struct DirectConvWeight {
  using Fwd = DirectConv<T, KV>;
  using V = typename Fwd::V;
  static constexpr int64_t kLanes = Fwd::kLanes, KB = Fwd::KB, TB = kAccRegs[KV] / KV;

  const Conv2dGeometry& g;  // the zero-padded image's geometry
  int64_t taps;

  template <int64_t TN> void block(const T* x, const T* dyt, int64_t t0, T* dwt) const {
    // Tap t0 + t reads x at pixel offset + off[t]: t0's channel, row and column by division,
    // then stepped (a division per tap: 32x64x8x8, 64 -> 64 channels, forward + backward 0.92 ->
    // 0.86 ms).
    int64_t off[TN], ci = t0 / (g.kh * g.kw), i = t0 / g.kw % g.kh, j = t0 % g.kw;
    for (int64_t t = 0; t < TN; ++t) {
      off[t] = (ci * g.h + i) * g.w + j;
      if (++j == g.kw) {
        j = 0;
        if (++i == g.kh) i = 0, ++ci;
      }
    }
    V acc[TN][KV] = {};
    const int64_t oh_n = g.out_h(), ow_n = g.out_w(), sw = g.stride_w;
    for (int64_t oh = 0; oh < oh_n; ++oh) {
      const T* row = x + oh * g.stride_h * g.w;
      const T* d = dyt + oh * ow_n * KB;
      for (int64_t ow = 0; ow < ow_n; ++ow, d += KB) {
        V dv[KV];
        for (int64_t v = 0; v < KV; ++v) dv[v] = Fwd::load(d + v * kLanes);
        const T* src = row + ow * sw;
#pragma GCC unroll 16
        for (int64_t t = 0; t < TN; ++t) {
          const T xv = src[off[t]];
          for (int64_t v = 0; v < KV; ++v) acc[t][v] += xv * dv[v];
        }
      }
    }
    for (int64_t t = 0; t < TN; ++t)
      for (int64_t v = 0; v < KV; ++v) {
        T* out = dwt + (t0 + t) * KB + v * kLanes;
        const V sum = Fwd::load(out) + acc[t][v];
        std::memcpy(out, &sum, sizeof(V));
      }
  }

  template <int64_t TN> void tail(const T* x, const T* dyt, int64_t t0, int64_t n, T* dwt) const {
    if constexpr (TN > 0) {
      if (n == TN) return block<TN>(x, dyt, t0, dwt);
      tail<TN - 1>(x, dyt, t0, n, dwt);
    }
  }

  void image(const T* x, const T* dyt, T* dwt) const {
    int64_t t0 = 0;
    for (; t0 + TB <= taps; t0 += TB) block<TB>(x, dyt, t0, dwt);
    tail<TB - 1>(x, dyt, t0, taps - t0, dwt);
  }
};

// dw and dbias with the direct kernel: one partial per thread's run of images, added in order
// (the same result on every call with the same thread count).
template <class T, int64_t KV> void conv_backward_weight_direct(const Conv2dGeometry& g, const ConvSizes& s, const T* x,
                                                                const T* dy, T* dw, T* dbias) {
  using Kernel = DirectConvWeight<T, KV>;
  constexpr int64_t KB = Kernel::KB;
  const int64_t kblocks = ceil_div(g.k, KB), block_size = s.taps * KB, dw_size = kblocks * block_size;
  const int64_t runs = std::max<int64_t>(1, std::min<int64_t>(g.n, num_threads()));
  alloc::Scratch<T> dwt_runs(static_cast<size_t>(dw != nullptr ? runs * dw_size : 0));  // [run][kb][tap][KB]
  std::vector<Acc> bias_runs(static_cast<size_t>(runs * g.k), Acc(0));
  const Conv2dGeometry gp = unpadded(g);
  const Kernel kernel{gp, s.taps};
  parallel_for(runs, 1, [&](int64_t r0, int64_t r1) {
    alloc::Scratch<T> dyt(static_cast<size_t>(dw != nullptr ? s.pixels * KB : 0));
    alloc::Scratch<T> xp(static_cast<size_t>(dw != nullptr ? gp.c * gp.h * gp.w : 0));
    for (int64_t r = r0; r < r1; ++r) {
      T* dwt = dw != nullptr ? dwt_runs.data() + r * dw_size : nullptr;
      if (dwt != nullptr) std::fill(dwt, dwt + dw_size, T(0));
      for (int64_t b = r * g.n / runs; b < (r + 1) * g.n / runs; ++b) {
        const T* dy_b = dy + b * s.out_img;
        for (int64_t k = 0; k < g.k && dbias != nullptr; ++k) {
          const T* row = dy_b + k * s.pixels;
          bias_runs[r * g.k + k] += sum_in_lanes(row, s.pixels);
        }
        if (dwt == nullptr) continue;
        const T* xb = pad_image(g, x + b * s.in_img, xp.data());
        for (int64_t kb = 0; kb < kblocks; ++kb) {
          for (int64_t v = 0; v < KB; ++v) {  // dy's rows of this block, each read in order
            const int64_t k = kb * KB + v;
            const T* row = dy_b + std::min(k, g.k - 1) * s.pixels;  // (zeros beyond k)
            for (int64_t p = 0; p < s.pixels; ++p) dyt.data()[p * KB + v] = k < g.k ? row[p] : T(0);
          }
          kernel.image(xb, dyt.data(), dwt + kb * block_size);
        }
      }
    }
  });
  if (dw != nullptr) {
    for_block_tiles(kblocks, s.taps, KB, [&](int64_t kb, int64_t t, int64_t v) {
      const int64_t k = kb * KB + v, at = kb * block_size + t * KB + v;
      if (k >= g.k) return;
      T sum = dwt_runs.data()[at];
      for (int64_t r = 1; r < runs; ++r) sum += dwt_runs.data()[r * dw_size + at];
      dw[k * s.taps + t] = sum;
    });
  }
  if (dbias != nullptr) add_runs(bias_runs, runs, g.k, dbias);
}

// Per group: dyg = the group's dy as (k, images*pixels); dw += dyg * col^T (one gemm whose inner
// dimension is every pixel of the group); dcol = w^T * dyg, scattered back by col2im into dx.
// The groups are cut into one contiguous run per thread; each run sums its own dw and dbias
// (dbias in double), and the runs are added in order, so the result is the same on every call
// with the same thread count.
template <class T>
void conv2d_backward(const Conv2dGeometry& g, const T* x, const T* w, const T* dy, T* dx, T* dw, T* dbias);

template <class T>
void conv2d_backward_grouped(const Conv2dGeometry& g, const T* x, const T* w, const T* dy, T* dx, T* dw, T* dbias) {
  const int64_t pixels = g.out_h() * g.out_w();
  if (dx == nullptr && dw == nullptr && dbias == nullptr) return;
  if (plane_kernels(g)) return conv2d_backward_planes(g, x, w, dy, dx, dw, dbias);
  const Conv2dGeometry s = one_group(g);
  const int64_t w_group = s.k * s.c * g.kh * g.kw;
  alloc::Scratch<T> xg(static_cast<size_t>(g.n * s.c * g.h * g.w)), dyg(static_cast<size_t>(g.n * s.k * pixels));
  alloc::Scratch<T> dxg(static_cast<size_t>(dx != nullptr ? g.n * s.c * g.h * g.w : 0));
  for (int64_t q = 0; q < g.groups; ++q) {
    if (dw != nullptr) move_channels(true, x, g.n, g.c, s.c, g.h * g.w, q, xg.data());
    move_channels(true, dy, g.n, g.k, s.k, pixels, q, dyg.data());
    conv2d_backward(s, xg.data(), w + q * w_group, dyg.data(), dx != nullptr ? dxg.data() : nullptr,
                    dw != nullptr ? dw + q * w_group : nullptr, dbias != nullptr ? dbias + q * s.k : nullptr);
    if (dx != nullptr) move_channels(false, dxg.data(), g.n, g.c, s.c, g.h * g.w, q, dx);
  }
}

// Strided dx as one stride-1 convolution per phase (a, b) of the padded input: rows Y = y + pad_h
// with Y % stride_h == a get only kernel rows a + stride_h * u, dx[a + stride_h * m] = sum_u
// w[a + stride_h * u] dy[m - u], a correlation of dy with the flipped sub-kernel that the forward
// kernels run. Each dx element is in one phase (every phase has taps: kernel >= stride), so dx is
// written once, with the taps' FLOPs and no col2im scatter.
template <class T> void conv_backward_input_phases(const Conv2dGeometry& g, const T* w, const T* dy, T* dx) {
  const int64_t oh = g.out_h(), ow = g.out_w(), sh = g.stride_h, sw = g.stride_w;
  auto floor_div = [](int64_t p, int64_t q) { return p >= 0 ? p / q : -((-p + q - 1) / q); };
  struct Phase {
    int64_t first, count, taps;  // outputs m in [first, first + count); kernel rows (or columns)
  };
  auto phase = [&](int64_t a, int64_t stride, int64_t pad, int64_t in, int64_t kernel) {
    const int64_t first = -floor_div(a - pad, stride), last = floor_div(in - 1 + pad - a, stride);
    return Phase{first, std::max<int64_t>(0, last - first + 1), ceil_div(kernel - a, stride)};
  };
  // a phase has at most ceil(h / sh) rows and ceil(kh / sh) taps (pooled buffers: no page faults)
  const int64_t rows = ceil_div(g.h, sh), cols = ceil_div(g.w, sw);
  alloc::Scratch<T> dyp(size_t(g.n * g.k * (rows + ceil_div(g.kh, sh)) * (cols + ceil_div(g.kw, sw))));
  alloc::Scratch<T> out(size_t(g.n * g.c * rows * cols)), wf(size_t(g.c * g.k * g.kh * g.kw));
  for (int64_t a = 0; a < sh; ++a)
    for (int64_t b = 0; b < sw; ++b) {
      const Phase r = phase(a, sh, g.pad_h, g.h, g.kh), c = phase(b, sw, g.pad_w, g.w, g.kw);
      if (r.count == 0 || c.count == 0) continue;
      const int64_t hp = r.count + r.taps - 1, wp = c.count + c.taps - 1, taps = r.taps * c.taps;
      for (int64_t ci = 0; ci < g.c; ++ci)  // (c, k, r.taps, c.taps), flipped
        for (int64_t k = 0; k < g.k; ++k)
          for (int64_t v = 0; v < taps; ++v)
            wf.data()[(ci * g.k + k) * taps + v] =
                w[((k * g.c + ci) * g.kh + a + sh * (r.taps - 1 - v / c.taps)) * g.kw + b +
                  sw * (c.taps - 1 - v % c.taps)];
      const int64_t x0 = c.first - (c.taps - 1), lo = std::clamp<int64_t>(-x0, 0, wp), hi = std::clamp(ow - x0, lo, wp);
      for_images(0, g.n, [&](int64_t n) {  // dy from row r.first - r.taps + 1, column x0 on; zeros outside
        for (int64_t k = 0; k < g.k; ++k)
          for (int64_t row = 0, oy = r.first - (r.taps - 1); row < hp; ++row, ++oy) {
            T* to = dyp.data() + ((n * g.k + k) * hp + row) * wp;
            std::fill(to, to + wp, T(0));
            if (oy >= 0 && oy < oh && hi > lo)
              std::copy_n(dy + ((n * g.k + k) * oh + oy) * ow + x0 + lo, hi - lo, to + lo);
          }
      });
      const Conv2dGeometry t{g.n, g.k, hp, wp, g.c, r.taps, c.taps, 1, 1, 0, 0, 1};
      conv2d_forward(t, dyp.data(), wf.data(), static_cast<const T*>(nullptr), out.data());
      for_images(0, g.n, [&](int64_t n) {
        for (int64_t ci = 0; ci < g.c; ++ci)
          for (int64_t m = 0; m < r.count; ++m) {
            T* row = dx + ((n * g.c + ci) * g.h + a + sh * (r.first + m) - g.pad_h) * g.w;
            const T* from = out.data() + ((n * g.c + ci) * r.count + m) * c.count;
            for (int64_t j = 0; j < c.count; ++j) row[b + sw * (c.first + j) - g.pad_w] = from[j];
          }
      });
    }
}

template <class T>
void conv2d_backward(const Conv2dGeometry& g, const T* x, const T* w, const T* dy, T* dx, T* dw, T* dbias) {
  // (a 1x1 at stride 2 stays with im2col: three of its four phases are zeros, slower as phases)
  if (dx != nullptr && g.groups == 1 && !plane_kernels(g) && (g.stride_h > 1 || g.stride_w > 1) && g.kh >= g.stride_h &&
      g.kw >= g.stride_w) {
    conv_backward_input_phases(g, w, dy, dx);
    dx = nullptr;
  }
  if (dx != nullptr && g.stride_h == 1 && g.stride_w == 1 && g.pad_h < g.kh && g.pad_w < g.kw) {
    // At stride 1, dx is itself a convolution: of dy, padded by kernel - 1 - pad, with each
    // kernel flipped and the channel axes swapped within each group. It runs as a forward.
    const Conv2dGeometry t{g.n, g.k, g.out_h(),          g.out_w(),          g.c,     g.kh, g.kw,
                           1,   1,   g.kh - 1 - g.pad_h, g.kw - 1 - g.pad_w, g.groups};
    const int64_t area = g.kh * g.kw, cg = g.c_per_group(), kg = g.k_per_group();
    alloc::Scratch<T> flipped(static_cast<size_t>(g.k * cg * area));  // (c, kg, kh, kw)
    for (int64_t k = 0; k < g.k; ++k)
      for (int64_t cl = 0; cl < cg; ++cl) {
        const int64_t c = k / kg * cg + cl;
        for (int64_t a = 0; a < area; ++a)
          flipped.data()[(c * kg + k % kg) * area + a] = w[(k * cg + cl) * area + area - 1 - a];
      }
    conv2d_forward(t, dy, flipped.data(), static_cast<const T*>(nullptr), dx);
    dx = nullptr;
  }
  if (g.groups > 1 || plane_kernels(g)) return conv2d_backward_grouped(g, x, w, dy, dx, dw, dbias);
  const ConvSizes s = conv_sizes(g);
  if (direct_dw(g, s) && (dw != nullptr || dbias != nullptr)) {
    with_channel_vectors<T>(
        g.k, [&](auto kv) { conv_backward_weight_direct<T, decltype(kv)::value>(g, s, x, dy, dw, dbias); });
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
            bias_r[k] += sum_in_lanes(row, ld);
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

// ---- the table's entries: tensors in, the templates above per dtype -----------------------------

void add_conv(Kernels& k) {
  k.conv2d_forward = [](const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                        const Tensor& residual, bool relu) {
    dispatch_float(y.dtype(), "conv2d", [&](auto t) {
      using T = decltype(t);
      conv2d_forward<T>(g, x.data<T>(), w.data<T>(), data_or_null<T>(bias), y.data<T>(),
                        w.storage()->constant() ? w.storage().get() : nullptr,
                        Epilogue<T>{data_or_null<T>(residual), relu});
    });
  };
  k.conv2d_backward = [](const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                         const Tensor& dw, const Tensor& dbias) {
    dispatch_float(dy.dtype(), "conv2d backward", [&](auto t) {
      using T = decltype(t);
      conv2d_backward<T>(g, x.data<T>(), w.data<T>(), dy.data<T>(), data_or_null<T>(dx), data_or_null<T>(dw),
                         data_or_null<T>(dbias));
    });
  };
}

}  // namespace nexus::ops::cpu::NX_CPU_VARIANT
