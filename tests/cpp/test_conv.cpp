// conv2d's CPU paths through the core's op API (ops/ops.h), against sums in long double: the
// direct kernel's channel and pixel blocks, plane kernels, groups, pointwise, im2col + GEMM and
// Winograd; their folded epilogues and gradients. Built once more under each CPU variant
// (CMakeLists.txt), whose vector widths decide the blocks and tiles.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "check.h"
#include "ops/derivatives.h"
#include "ops/ops.h"
#include "tensors.h"
#include "threads.h"

using namespace nexus;
using test::elements;
using test::tensor;
using test::Threads;

// n values drawn uniformly from [-1, 1).
template <class T> std::vector<T> uniform_values(std::mt19937& rng, int64_t n) {
  std::uniform_real_distribution<T> uniform(-1, 1);
  std::vector<T> v(static_cast<size_t>(n));
  for (T& e : v) e = uniform(rng);
  return v;
}

// y[b, k, oh, ow] = bias[k] + sum over c, i, j of x[b, c, oh*sh - ph + i, ow*sw - pw + j] * w[k, c, i, j]
// (0 outside the input), in long double; c runs over output channel k's group only.
struct ConvCase {
  int64_t n, c, h, w, k, kh, kw, sh, sw, ph, pw, groups = 1;
  int64_t out_h() const { return (h + 2 * ph - kh) / sh + 1; }
  int64_t out_w() const { return (w + 2 * pw - kw) / sw + 1; }
  int64_t cg() const { return c / groups; }                                           // the weight's second dimension
  int64_t first_channel(int64_t k_out) const { return k_out / (k / groups) * cg(); }  // of k_out's group
};

template <class T> std::vector<T> conv_reference(const ConvCase& g, const std::vector<T>& x, const std::vector<T>& w,
                                                 const std::vector<T>& bias) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  std::vector<T> y(size_t(g.n * g.k * oh_n * ow_n));
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t k = 0; k < g.k; ++k)
      for (int64_t oh = 0; oh < oh_n; ++oh)
        for (int64_t ow = 0; ow < ow_n; ++ow) {
          long double acc = bias.empty() ? 0 : bias[size_t(k)];
          for (int64_t cl = 0; cl < g.cg(); ++cl)
            for (int64_t i = 0; i < g.kh; ++i)
              for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t ih = oh * g.sh - g.ph + i, iw = ow * g.sw - g.pw + j;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                acc += (long double)x[size_t(((b * g.c + g.first_channel(k) + cl) * g.h + ih) * g.w + iw)] *
                       w[size_t(((k * g.cg() + cl) * g.kh + i) * g.kw + j)];
              }
          y[size_t(((b * g.k + k) * oh_n + oh) * ow_n + ow)] = T(acc);
        }
  return y;
}

// constant_w: w's storage marked constant, as an inference graph's (Winograd F(4x4) runs only then).
template <class T> void check_conv2d(const ConvCase& g, bool with_bias, bool constant_w = false) {
  std::mt19937 rng(41);
  auto random = [&](int64_t n) { return uniform_values<T>(rng, n); };
  const std::vector<T> x = random(g.n * g.c * g.h * g.w), w = random(g.k * g.cg() * g.kh * g.kw);
  const std::vector<T> bias = with_bias ? random(g.k) : std::vector<T>{};
  Tensor wt = tensor<T>({g.k, g.cg(), g.kh, g.kw}, w);
  if (constant_w) wt.storage()->mark_constant();
  const Tensor y = ops::conv2d(tensor<T>({g.n, g.c, g.h, g.w}, x), wt, with_bias ? tensor<T>({g.k}, bias) : Tensor(),
                               g.sh, g.sw, g.ph, g.pw, g.groups);
  const std::vector<T> want = conv_reference(g, x, w, bias), got = elements<T>(y);
  CHECK(got.size() == want.size());
  // Where Winograd F(4x4, 3x3) may run (float32, constant weights, 3x3 at stride 1 with padding
  // 1, output sizes multiples of 4), its transforms' larger coefficients allow five times the
  // rounding error.
  const bool f4 = std::is_same_v<T, float> && constant_w && g.groups == 1 && g.kh == 3 && g.kw == 3 && g.sh == 1 &&
                  g.sw == 1 && g.ph == 1 && g.pw == 1 && g.out_h() % 4 == 0 && g.out_w() % 4 == 0;
  const T tol = (std::is_same_v<T, float> ? T(f4 ? 2e-6 : 4e-7) : T(1e-15)) * T(1 + g.cg() * g.kh * g.kw);
  int64_t wrong = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) wrong += !(std::abs(got[i] - want[i]) <= tol);
  CHECK_MSG(wrong == 0, wrong << " of " << want.size() << " wrong for n=" << g.n << " c=" << g.c << " " << g.h << "x"
                              << g.w << " k=" << g.k << " kernel " << g.kh << "x" << g.kw << " stride " << g.sh << ","
                              << g.sw << " pad " << g.ph << "," << g.pw << " groups " << g.groups
                              << " bias=" << with_bias);
}

TEST(conv2d_matches_the_scalar_sum_over_channel_blocks_pixel_tails_strides_and_padding) {
  Threads threads(3);
  // Output channels on both sides of one and two vectors of every variant (4 .. 32 lanes), three
  // (24, 48: blocks of three vectors where the registers hold them) and several blocks; every
  // row width from 1 pixel to past the widest pixel block (16), so that every tail width runs.
  for (int64_t k : {1, 5, 8, 9, 16, 17, 24, 32, 33, 48, 70})
    for (int64_t width = 1; width <= 25; ++width) check_conv2d<float>({2, 3, 4, width + 2, k, 3, 3, 1, 1, 0, 0}, k % 2);
  for (const ConvCase& g : std::vector<ConvCase>{
           {1, 16, 32, 32, 16, 3, 3, 1, 1, 1, 1},  // a ResNet block's shape, at batch 1
           {3, 6, 14, 13, 16, 5, 5, 2, 1, 2, 1},   // unequal strides and padding
           {2, 1, 9, 11, 6, 2, 3, 1, 2, 0, 1},     // a non-square kernel
           {2, 6, 7, 27, 24, 2, 4, 2, 1, 1, 2},    // ... rows of 28: cut into nearly equal blocks
           {2, 20, 5, 6, 40, 1, 1, 2, 2, 0, 0},    // pointwise, strided
           {2, 16, 33, 31, 37, 1, 1, 2, 2, 0, 0},  // ... several runs of pixels, the last partial,
           {1, 24, 13, 11, 20, 1, 1, 1, 1, 0, 0},  // ... a pixel tail at stride 1, and
           {2, 7, 9, 10, 13, 1, 1, 3, 2, 0, 0},    // ... unequal strides
           {1, 80, 6, 6, 24, 1, 1, 1, 1, 0, 0},    // pointwise over many channels (the GEMM path)
           {3, 64, 5, 7, 33, 1, 1, 1, 1, 0, 0},    // ... image by image, straight from x into y
           {1, 460, 3, 4, 8, 3, 3, 1, 1, 1, 1},    // 4140 taps (the GEMM path)
           {0, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1},      // an empty batch
           {1, 32, 20, 23, 48, 3, 3, 2, 1, 1, 1},  // work enough for tasks on all 3 threads: each
                                                   // pads the input rows of its band of outputs
       }) {
    check_conv2d<float>(g, true);
    check_conv2d<double>(g, false);
  }
}

// The folded epilogue (an inference graph's Add and ReLU run as the conv stores) gives the bits of
// conv2d, then the add, then relu, on every path: the direct kernel's full blocks and pixel tails,
// plane kernels, groups, pointwise, im2col and Winograd; and it refuses to run where a backward is
// wanted.
template <class T> void check_conv2d_epilogue(const ConvCase& g, bool constant_w = false) {
  std::mt19937 rng(43);
  auto random = [&](int64_t n) { return tensor<T>({n}, uniform_values<T>(rng, n)); };
  Tensor x = ops::reshape(random(g.n * g.c * g.h * g.w), {g.n, g.c, g.h, g.w});
  Tensor w = ops::reshape(random(g.k * g.cg() * g.kh * g.kw), {g.k, g.cg(), g.kh, g.kw});
  if (constant_w) w.storage()->mark_constant();
  Tensor bias = random(g.k),
         res = ops::reshape(random(g.n * g.k * g.out_h() * g.out_w()), {g.n, g.k, g.out_h(), g.out_w()});
  Tensor conv = ops::conv2d(x, w, bias, g.sh, g.sw, g.ph, g.pw, g.groups);
  for (bool add : {false, true})
    for (bool relu : {false, true}) {
      Tensor want = add ? ops::binary(ops::BinaryOp::Add, conv, res) : conv;
      if (relu) want = ops::unary(ops::UnaryOp::Relu, want);
      Tensor got = ops::conv2d_epilogue(x, w, bias, g.sh, g.sw, g.ph, g.pw, g.groups, add ? res : Tensor(), relu);
      const std::vector<T> a = elements<T>(got), b = elements<T>(want);
      CHECK_MSG(a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0,
                "epilogue add=" << add << " relu=" << relu << " for c=" << g.c << " k=" << g.k << " " << g.h << "x"
                                << g.w << " kernel " << g.kh << " groups " << g.groups);
    }
}

TEST(conv2d_epilogues_give_the_bits_of_the_ops_they_replace) {
  Threads threads(2);
  for (const ConvCase& g : std::vector<ConvCase>{
           {2, 16, 9, 11, 16, 3, 3, 1, 1, 1, 1},   // direct, one vector of channels, pixel tails
           {2, 6, 7, 27, 48, 2, 4, 2, 1, 1, 2},    // direct, rows cut into nearly equal blocks
           {1, 8, 7, 7, 40, 3, 3, 2, 2, 1, 1},     // direct, two vectors, strided
           {2, 3, 10, 10, 6, 5, 5, 1, 1, 2, 2},    // plane kernels (few output channels)
           {1, 8, 6, 6, 16, 3, 3, 1, 1, 1, 1, 2},  // two groups
           {2, 80, 4, 5, 24, 1, 1, 1, 1, 0, 0},    // pointwise (GEMM)
           {2, 16, 17, 19, 20, 1, 1, 2, 2, 0, 0},  // pointwise, few channels: pixel and channel tails
           {1, 460, 3, 4, 8, 3, 3, 1, 1, 1, 1},    // im2col + GEMM
           {2, 8, 32, 32, 16, 3, 3, 1, 1, 1, 1},   // Winograd: a tile row per vector, or
           {1, 16, 16, 16, 8, 3, 3, 1, 1, 1, 1},   // ... two or four of them (AVX-512), and
           {1, 8, 10, 10, 12, 3, 3, 1, 1, 0, 0},   // ... unpadded, and edge groups
           {1, 6, 13, 28, 64, 3, 3, 1, 1, 1, 1},
           {2, 6, 14, 14, 64, 3, 3, 1, 1, 1, 1},  // ... edge groups of two tile rows (AVX-512)
       }) {
    check_conv2d_epilogue<float>(g);
    check_conv2d_epilogue<double>(g);
  }
  Tensor x = tensor<float>({1, 1, 3, 3}, std::vector<float>(9, 1.0f)), w = tensor<float>({1, 1, 1, 1}, {2.0f});
  w.set_requires_grad(true);
  CHECK_THROWS(ops::conv2d_epilogue(x, w, Tensor(), 1, 1, 0, 0, 1, Tensor(), true), ValueError, "has no backward");
}

TEST(grouped_conv2d_matches_the_scalar_sum_over_each_group) {
  Threads threads(3);
  // Depthwise rows from 1 pixel to past two vectors of the widest variant (tile tails along rows
  // and columns), at strides 1 to 3 and paddings up to the kernel; then channel multipliers,
  // several input channels per group and groups of 8+ outputs (gathered, run ungrouped).
  for (int64_t width = 1; width <= 35; width += 2)
    for (int64_t stride : {1, 2, 3})
      check_conv2d<float>({2, 3, 11, width + 2, 3, 3, 3, stride, stride, 1, stride % 2, 3}, width % 3 == 0);
  for (const ConvCase& g : std::vector<ConvCase>{
           {2, 4, 10, 9, 8, 5, 5, 1, 1, 2, 2, 4},      // channel multiplier 2, 5x5
           {1, 6, 7, 19, 6, 2, 4, 2, 1, 1, 2, 3},      // two channels in, two out per group
           {2, 8, 9, 9, 16, 3, 3, 1, 2, 1, 0, 4},      // two in, four out, mixed stride
           {1, 2, 4, 4, 2, 1, 1, 1, 1, 2, 2, 2},       // padding beyond the kernel
           {2, 16, 6, 7, 32, 3, 3, 1, 1, 1, 1, 2},     // 16 outputs per group: the ungrouped kernels
           {0, 4, 5, 5, 4, 3, 3, 1, 1, 1, 1, 4},       // an empty batch
           {4, 64, 28, 28, 64, 3, 3, 1, 1, 1, 1, 64},  // depthwise, planes enough for 3 threads' tasks
       }) {
    check_conv2d<float>(g, true);
    check_conv2d<double>(g, false);
  }
}

// dx, dw and dbias of conv2d for the output gradient dy, in long double: each product of the
// forward sum sends dy * w to dx and dy * x to dw.
template <class T> void check_conv2d_grad(const ConvCase& g) {
  std::mt19937 rng(43);
  auto random = [&](int64_t n) { return uniform_values<T>(rng, n); };
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  const std::vector<T> x = random(g.n * g.c * g.h * g.w), w = random(g.k * g.cg() * g.kh * g.kw);
  const std::vector<T> dy = random(g.n * g.k * oh_n * ow_n);
  std::vector<long double> dx(x.size()), dw(w.size()), db(size_t(g.k));
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t k = 0; k < g.k; ++k)
      for (int64_t oh = 0; oh < oh_n; ++oh)
        for (int64_t ow = 0; ow < ow_n; ++ow) {
          const long double d = dy[size_t(((b * g.k + k) * oh_n + oh) * ow_n + ow)];
          db[size_t(k)] += d;
          for (int64_t cl = 0; cl < g.cg(); ++cl)
            for (int64_t i = 0; i < g.kh; ++i)
              for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t ih = oh * g.sh - g.ph + i, iw = ow * g.sw - g.pw + j;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                const size_t xi = size_t(((b * g.c + g.first_channel(k) + cl) * g.h + ih) * g.w + iw);
                const size_t wi = size_t(((k * g.cg() + cl) * g.kh + i) * g.kw + j);
                dx[xi] += d * w[wi];
                dw[wi] += d * x[xi];
              }
        }
  const std::vector<Tensor> got =
      ops::grad::conv2d_grad(tensor<T>({g.n, g.k, oh_n, ow_n}, dy), tensor<T>({g.n, g.c, g.h, g.w}, x),
                             tensor<T>({g.k, g.cg(), g.kh, g.kw}, w),
                             std::vector<int64_t>{g.sh, g.sw, g.ph, g.pw, g.groups}, {true, true, true});
  const T eps = std::is_same_v<T, float> ? T(4e-7) : T(1e-15);
  auto count_wrong = [&](const Tensor& t, const std::vector<long double>& want, int64_t terms) {
    const std::vector<T> v = elements<T>(t);
    int64_t wrong = int64_t(v.size() != want.size());
    for (size_t i = 0; i < want.size() && i < v.size(); ++i)
      wrong += !(std::abs(v[i] - T(want[i])) <= eps * T(1 + terms));
    return wrong;
  };
  const int64_t wrong_dx = count_wrong(got[0], dx, g.k / g.groups * g.kh * g.kw);
  const int64_t wrong_dw = count_wrong(got[1], dw, g.n * oh_n * ow_n);
  const int64_t wrong_db = count_wrong(got[2], db, g.n * oh_n * ow_n);
  CHECK_MSG(wrong_dx + wrong_dw + wrong_db == 0,
            "dx " << wrong_dx << ", dw " << wrong_dw << ", dbias " << wrong_db << " wrong for n=" << g.n << " c=" << g.c
                  << " " << g.h << "x" << g.w << " k=" << g.k << " kernel " << g.kh << "x" << g.kw << " stride " << g.sh
                  << "," << g.sw << " pad " << g.ph << "," << g.pw << " groups " << g.groups);
}

TEST(conv2d_gradients_match_the_scalar_sums) {
  Threads threads(3);
  for (const ConvCase& g : std::vector<ConvCase>{
           {3, 6, 14, 13, 16, 5, 5, 1, 1, 2, 1},  // stride 1: dx as a flipped forward
           {2, 5, 9, 10, 33, 3, 3, 1, 1, 1, 1},   // two channel blocks (one on the widest variant)
           {2, 4, 9, 9, 70, 3, 2, 1, 1, 0, 1},    // several blocks, a non-square kernel
           {3, 3, 11, 12, 9, 3, 3, 2, 2, 1, 1},   // stride 2: dx as four stride-1 phase convolutions
           {2, 4, 13, 10, 17, 2, 4, 2, 1, 1, 2},  // mixed strides, a 2x4 kernel, padding (1, 2)
           {2, 4, 13, 10, 48, 2, 4, 2, 1, 1, 2},  // ... three channel vectors (float, AVX-512)
           {2, 4, 13, 10, 24, 2, 4, 2, 1, 1, 2},  // ... (double, AVX-512)
           {2, 3, 10, 11, 8, 5, 5, 3, 3, 2, 1},   // stride 3: phases of 2 and 1 taps, odd counts
           {1, 2, 9, 8, 12, 4, 4, 2, 2, 0, 0},    // an even kernel, no padding
           {2, 3, 9, 9, 10, 1, 1, 2, 2, 0, 0},    // a 1x1 at stride 2: im2col (three phases empty)
           {2, 2, 6, 6, 5, 3, 3, 1, 1, 2, 2},     // padding of the whole kernel extent less one
           {1, 460, 4, 4, 6, 3, 3, 1, 1, 1, 1},   // 4140 taps: dw through gemm
           {0, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1},     // an empty batch: dw and dbias are 0
       }) {
    check_conv2d_grad<float>(g);
    check_conv2d_grad<double>(g);
  }
  // Grouped: the plane kernels (dx as a flipped forward at stride 1, phases at stride 2 and 3,
  // taps in blocks of 9 with tails) and groups run ungrouped.
  for (const ConvCase& g : std::vector<ConvCase>{
           {3, 4, 9, 21, 4, 3, 3, 1, 1, 1, 1, 4},   // depthwise
           {2, 3, 11, 10, 6, 5, 5, 2, 2, 2, 2, 3},  // multiplier 2, 5x5 (25 taps), stride 2
           {2, 6, 8, 13, 6, 2, 4, 3, 1, 0, 2, 3},   // two in, two out per group
           {1, 2, 4, 4, 2, 1, 1, 1, 1, 2, 2, 2},    // padding beyond the kernel
           {2, 16, 6, 7, 32, 3, 3, 2, 1, 1, 1, 2},  // 16 outputs per group: the ungrouped kernels
           {0, 4, 5, 5, 4, 3, 3, 1, 1, 1, 1, 4},    // an empty batch
       }) {
    check_conv2d_grad<float>(g);
    check_conv2d_grad<double>(g);
  }
  // Every tail of the weight gradient's tap blocks (up to 24 taps) with one, two and three
  // channel vectors.
  for (int64_t c = 1; c <= 25; ++c)
    for (int64_t k : {3, 20, 48}) check_conv2d_grad<float>({2, c, 4, 5, k, 1, 1, 1, 1, 0, 0});
}

// ---- Winograd F(2x2, 3x3): float32 3x3 at stride 1, tiles filling whole vectors -------------------

// Output widths of 2 to 64 (one, two or four tile rows per vector on every variant, or rows of
// several vectors), both paddings, output channels in blocks of 4, 8 or 16, input channels from
// one up.
TEST(winograd_conv2d_matches_the_scalar_sum) {
  Threads threads(3);
  for (int64_t width : {2, 4, 8, 16, 32, 64})
    for (int64_t pad : {0, 1})
      for (int64_t k : {4, 8, 12, 16, 48})  // outputs of 8 rows x `width`
        check_conv2d<float>({2, 9, 10 - 2 * pad, width + 2 - 2 * pad, k, 3, 3, 1, 1, pad, pad}, k % 8 == 0);
  for (const ConvCase& g : std::vector<ConvCase>{
           {2, 1, 16, 16, 16, 3, 3, 1, 1, 1, 1},   // one input channel
           {1, 3, 32, 32, 8, 3, 3, 1, 1, 1, 1},    // an RGB image, few output channels
           {1, 64, 8, 8, 64, 3, 3, 1, 1, 1, 1},    // fewer tile groups than threads: channel blocks split
           {2, 5, 28, 28, 64, 3, 3, 1, 1, 1, 1},   // rows ending in a partial vector (edge groups)
           {1, 8, 15, 17, 64, 3, 3, 1, 1, 1, 1},   // odd sizes: half tiles at the right and bottom
           {1, 4, 9, 30, 64, 3, 3, 1, 1, 0, 0},    // ... unpadded
           {3, 20, 16, 16, 32, 3, 3, 1, 1, 1, 1},  // several images, units shared among the threads
           {2, 8, 14, 14, 64, 3, 3, 1, 1, 1, 1},   // 7 tiles a row: 2 rows in 8-lane segments (AVX-512),
           {1, 6, 6, 6, 64, 3, 3, 1, 1, 1, 1},     // ... 3 tiles: 4 rows (2 on AVX2), the last rows missing
           {1, 5, 7, 9, 64, 3, 3, 1, 1, 1, 1},     // ... odd sizes: half tiles in segments
           {1, 7, 16, 16, 64, 3, 3, 1, 1, 0, 0},   // ... unpadded
           {1, 8, 6, 6, 16, 3, 3, 1, 1, 1, 1},     // 3 tiles a row, 16 outputs: direct
       })
    check_conv2d<float>(g, true);
}

// F(4x4, 3x3): constant weights (an inference graph's), padding 1, outputs whose 4x4 tiles fill
// the vectors: one, two or four tile rows
// per vector (which, depends on the variant's width: 4 to 16 lanes), and rows of several vector
// groups, whose patches take their first and last columns from the neighbouring group; both
// folded epilogues. Its rounding error, larger than F(2x2)'s, stays within the same bound.
TEST(winograd_4x4_conv2d_matches_the_scalar_sum) {
  Threads threads(3);
  for (int64_t width : {4, 8, 16, 32, 64, 128, 256})
    for (int64_t k : {4, 8, 16, 48}) check_conv2d<float>({2, 9, 16, width, k, 3, 3, 1, 1, 1, 1}, k % 8 == 0, true);
  for (const ConvCase& g : std::vector<ConvCase>{
           {1, 1, 32, 32, 16, 3, 3, 1, 1, 1, 1},   // one input channel
           {1, 3, 32, 32, 16, 3, 3, 1, 1, 1, 1},   // an RGB image
           {1, 64, 16, 16, 64, 3, 3, 1, 1, 1, 1},  // one tile group an image: channel blocks split
           {3, 32, 16, 16, 32, 3, 3, 1, 1, 1, 1},  // several images
           {1, 16, 64, 64, 16, 3, 3, 1, 1, 1, 1},
       }) {
    check_conv2d<float>(g, true, true);
    check_conv2d_epilogue<float>(g, true);
  }
}

// A sample's output does not depend on the batch it came in, the thread count, or whether the
// weights' transform was kept (a constant weight) or made for the call: the same bits each way.
TEST(winograd_conv2d_bits_do_not_depend_on_batch_threads_or_kept_weights) {
  std::mt19937 rng(7);
  for (const ConvCase& g : std::vector<ConvCase>{{4, 16, 32, 32, 16, 3, 3, 1, 1, 1, 1},
                                                 {3, 32, 16, 16, 32, 3, 3, 1, 1, 1, 1},
                                                 {5, 64, 8, 8, 64, 3, 3, 1, 1, 1, 1},
                                                 {3, 8, 15, 28, 64, 3, 3, 1, 1, 1, 1},
                                                 {3, 16, 14, 14, 64, 3, 3, 1, 1, 1, 1}}) {
    const int64_t in_img = g.c * g.h * g.w, out_img = g.k * g.out_h() * g.out_w();
    const std::vector<float> x = uniform_values<float>(rng, g.n * in_img),
                             w = uniform_values<float>(rng, g.k * g.c * 9);
    const std::vector<float> bias = uniform_values<float>(rng, g.k);
    auto run = [&](int64_t b0, int64_t n, bool constant) {
      Tensor wt = tensor<float>({g.k, g.c, 3, 3}, w);
      if (constant) wt.storage()->mark_constant();
      const std::vector<float> part(x.begin() + b0 * in_img, x.begin() + (b0 + n) * in_img);
      return elements<float>(
          ops::conv2d(tensor<float>({n, g.c, g.h, g.w}, part), wt, tensor<float>({g.k}, bias), 1, 1, g.ph, g.pw, 1));
    };
    // F(4x4) runs for constant weights only, where the tiles fill this variant's vectors: kept and
    // fresh weights give the same bits where it cannot run.
    const bool f4 = g.ph == 1 && g.out_h() % 4 == 0 && g.out_w() % 4 == 0;
    for (bool constant : {false, true}) {
      std::vector<float> batch;
      {
        Threads threads(2);
        batch = run(0, g.n, constant);
        if (!f4) CHECK_MSG(run(0, g.n, !constant) == batch, "kept weights for c=" << g.c);
        for (int64_t b = 0; b < g.n; ++b)
          CHECK_MSG(
              run(b, 1, constant) == std::vector<float>(batch.begin() + b * out_img, batch.begin() + (b + 1) * out_img),
              "image " << b << " alone for c=" << g.c << " constant=" << constant);
      }
      Threads one(1);
      CHECK_MSG(run(0, g.n, constant) == batch, "one thread for c=" << g.c << " constant=" << constant);
    }
  }
}
