// Winograd F(2x2, 3x3) for float32 3x3 convolutions at stride 1 (Lavin and Gray, "Fast
// Algorithms for Convolutional Neural Networks", 2016). Each 2x2 tile of output pixels comes from
// the 4x4 patch of input it reads: the patch d and the filter g are transformed, multiplied
// element by element and summed over input channels, and the sum transformed back,
//   Y = A^T [ sum over c of (G g G^T) . (B^T d B) ] A,
// 16 products per tile and channel pair where the direct kernel makes 36 (4 pixels x 9 taps).
// The transforms only add and halve; their rounding differs from the direct sum's by a few ulps.
//
// Layout: a vector's lanes are L output tiles of one image (one tile row, or 2 or 4 whole tile
// rows when a row has fewer than L tiles), in the lane order in-lane shuffles give (Tiles, below).
// For each group of L tiles:
//   1. the input transform, channel by channel: the patches' rows are strided loads (tile t
//      starts at column 2t), made of contiguous loads and shuffles within 128-bit lanes;
//   2. for each block of KR output channels and each of the 16 transformed positions, the sum
//      over input channels: KR accumulators of L tiles, each input vector times KR broadcast
//      transformed weights (the direct kernel's shape, with channels for taps);
//   3. the output transform, bias and epilogue, and the 2x2 tiles interleaved back into rows (the
//      inverse shuffles): whole-vector stores into the NCHW output.
// The filters' transform is made once for a constant weight, as the direct kernel's packing.
//
// F(4x4, 3x3) (below) has the same shape with 6x6 patches and 4x4 tiles: 36 products for 16 pixels
// where F(2x2) makes 64, taken where its tiles fill the vectors exactly.
#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "base/thread_pool.h"
#include "ops/cpu/conv_common.h"
#include "tensor/allocator.h"

// GCC vectors wider than the baseline's registers; their ABI differs between variants, which is
// moot for functions local to this file.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace nexus::ops::cpu::NX_CPU_VARIANT {
namespace {

typedef float V __attribute__((vector_size(kVecBytes)));
typedef float H __attribute__((vector_size(kVecBytes / 2)));
typedef int32_t IV __attribute__((vector_size(kVecBytes)));
constexpr int64_t L = kVecBytes / sizeof(float);
constexpr int kXi = 16;  // transformed positions per tile (4x4)
// Output channels summed at once: accumulators held in registers beside the input vector.
constexpr int64_t kMaxKR = kAccRegs[2] >= 24 ? 16 : 8;

template <int... I> V concat(H a, H b, std::integer_sequence<int, I...>) { return __builtin_shufflevector(a, b, I...); }
template <int... I> H half_of(V a, int half, std::integer_sequence<int, I...>) {
  return half == 0 ? __builtin_shufflevector(a, a, I...) : __builtin_shufflevector(a, a, (I + int(L) / 2)...);
}
constexpr auto kLanes = std::make_integer_sequence<int, int(L)>();
constexpr auto kHalfLanes = std::make_integer_sequence<int, int(L) / 2>();

// ---- tiles in lanes ----------------------------------------------------------------------------
// A group's tiles sit in the lanes of the transformed vectors in the order that in-lane shuffles
// leave them, not left to right: splitting a run of tiles' columns into one vector per column
// phase, and interleaving the output's phases back into pixels, then stay within 128-bit lanes
// (unpack and shufps: one cheap instruction each) instead of crossing them (a permute and a blend
// per vector; they were half the input transform's time on AVX2). The transforms and the
// products treat lanes alike, so the order costs nothing in between; only the step from a tile to
// its left or right neighbour (a patch's outer columns) follows it.
//
// Tiles<W> for tiles W columns wide (2: F(2x2), 4: F(4x4)): the W vectors of a run of W*L floats
// (L tiles, tile t in floats [W*t, W*t + W)) hold, in 128-bit lane j, tiles lane_tile(4j + e) for
// e = 0..3 after split2 (W = 2) or transpose4 (W = 4), below.
constexpr int kQuads = int(L) / 4;  // 128-bit lanes per vector
template <int W> struct Tiles {
  // The tile in lane p, and the lane of tile t.
  static constexpr int lane_tile(int p) {
    if constexpr (W == 4) return p % 4 * kQuads + p / 4;  // a 4x4 transpose in each 128-bit lane
    const int j = p / 4, e = p % 4;                       // shufps of (a, b): a's pairs, then b's
    return e < 2 ? 2 * j + e : int(L) / 2 + 2 * j + e - 2;
  }
  static constexpr int tile_lane(int t) {
    for (int p = 0; p < int(L); ++p)
      if (lane_tile(p) == t) return p;
    return -1;
  }
  // Lane p of move<S, D>(a, b): the lane of a holding tile lane_tile(p) + D (D = +-1), or b's lane
  // 0 where that tile would be outside p's segment of S tiles (a tile row's run).
  template <int S, int D> static constexpr int move_index(int p) {
    const int t = lane_tile(p), u = t + D;
    return (D < 0 ? t % S == 0 : t % S == S - 1) ? int(L) : tile_lane(u);
  }
  template <int S, int D, int... I> static V move(V a, V b, std::integer_sequence<int, I...>) {
    return __builtin_shuffle(a, b, IV{move_index<S, D>(I)...});
  }
  // Each tile's left (D = -1) or right (D = +1) neighbour's lane, b's lane 0 entering at the ends
  // of segments of S tiles.
  template <int S> static V left(V a, V b) { return move<S, -1>(a, b, kLanes); }
  template <int S> static V right(V a, V b) { return move<S, 1>(a, b, kLanes); }
};

// In-lane shuffles of two vectors (lane p = 4j + e): unpacklo/hi, and the low or high pairs of both.
template <int... I> V unpack(V a, V b, int hi, std::integer_sequence<int, I...>) {
  return hi == 0 ? __builtin_shuffle(a, b, IV{(I / 4 * 4 + I % 4 / 2 + (I % 2) * int(L))...})
                 : __builtin_shuffle(a, b, IV{(I / 4 * 4 + 2 + I % 4 / 2 + (I % 2) * int(L))...});
}
template <int... I> V pairs(V a, V b, int hi, std::integer_sequence<int, I...>) {
  return hi == 0 ? __builtin_shuffle(a, b, IV{(I / 4 * 4 + I % 2 + (I % 4 / 2) * int(L))...})
                 : __builtin_shuffle(a, b, IV{(I / 4 * 4 + I % 2 + 2 + (I % 4 / 2) * int(L))...});
}
// Lanes 4j + 2e' (phase 0) or 4j + 2e' + 1 (phase 1) of a, then of b, in each 128-bit lane (shufps).
template <int... I> V phase2(V a, V b, int phase, std::integer_sequence<int, I...>) {
  return phase == 0 ? __builtin_shuffle(a, b, IV{(I / 4 * 4 + 2 * (I % 2) + (I % 4 / 2) * int(L))...})
                    : __builtin_shuffle(a, b, IV{(I / 4 * 4 + 2 * (I % 2) + 1 + (I % 4 / 2) * int(L))...});
}

// The 2L floats a, b (L tiles of 2 columns) as their tiles' column 0 and column 1, in
// Tiles<2>'s lane order; merge2 is its inverse, lo and hi the floats of a and b.
inline void split2(V a, V b, V& c0, V& c1) { c0 = phase2(a, b, 0, kLanes), c1 = phase2(a, b, 1, kLanes); }
inline void merge2(V c0, V c1, V& lo, V& hi) { lo = unpack(c0, c1, 0, kLanes), hi = unpack(c0, c1, 1, kLanes); }
// x[0..3] (4L floats, L tiles of 4 columns) to their tiles' columns 0..3 in Tiles<4>'s lane order,
// a 4x4 transpose in each 128-bit lane; the same transpose turns columns back into pixels.
inline void transpose4(V* x) {
  const V t0 = unpack(x[0], x[1], 0, kLanes), t1 = unpack(x[2], x[3], 0, kLanes), t2 = unpack(x[0], x[1], 1, kLanes),
          t3 = unpack(x[2], x[3], 1, kLanes);
  x[0] = pairs(t0, t1, 0, kLanes), x[1] = pairs(t0, t1, 1, kLanes), x[2] = pairs(t2, t3, 0, kLanes),
  x[3] = pairs(t2, t3, 1, kLanes);
}

// 2L floats in ROWS segments of 2L/ROWS, segment r at p + r * stride, as two vectors.
template <int ROWS> void load_seq(const float* p, int64_t stride, V& a, V& b) {
  if constexpr (ROWS == 1) {
    a = load_vector<V>(p), b = load_vector<V>(p + L);
  } else if constexpr (ROWS == 2) {
    a = load_vector<V>(p), b = load_vector<V>(p + stride);
  } else {
    a = concat(load_vector<H>(p), load_vector<H>(p + stride), kLanes);
    b = concat(load_vector<H>(p + 2 * stride), load_vector<H>(p + 3 * stride), kLanes);
  }
}
template <int ROWS> void store_seq(float* p, int64_t stride, V a, V b) {
  if constexpr (ROWS == 1) {
    std::memcpy(p, &a, sizeof(V)), std::memcpy(p + L, &b, sizeof(V));
  } else if constexpr (ROWS == 2) {
    std::memcpy(p, &a, sizeof(V)), std::memcpy(p + stride, &b, sizeof(V));
  } else {
    const H h[4] = {half_of(a, 0, kHalfLanes), half_of(a, 1, kHalfLanes), half_of(b, 0, kHalfLanes),
                    half_of(b, 1, kHalfLanes)};
    for (int r = 0; r < 4; ++r) std::memcpy(p + r * stride, &h[r], sizeof(H));
  }
}

// Tile rows per vector: 2 or 4 when that many rows' tiles fill a vector exactly; else 2 or 4
// when a row's tiles fill more than half of a segment of L / rows lanes (14 wide on AVX-512: 7
// tiles in each 8-lane half, where a row per vector used 7 lanes of 16); else 1 (each row's tiles
// in whole vectors and perhaps one partial one), or 0 when a row would leave more than half of
// its vectors' lanes empty.
int64_t rows_per_vector(const Conv2dGeometry& g) {
  const int64_t tiles_w = ceil_div(g.out_w(), 2), tiles_h = ceil_div(g.out_h(), 2);
  if (tiles_w == 0 || tiles_h == 0) return 0;
  const int64_t rows = L / tiles_w;
  if (g.out_w() % 2 == 0 && g.out_h() % 2 == 0 && tiles_w < L && L % tiles_w == 0 && rows <= 4 && tiles_h % rows == 0)
    return rows;
  for (int64_t r = 4; r >= 2; r /= 2)
    if (tiles_w <= L / r && 2 * tiles_w > L / r) return r;
  // one row's tiles in vectors, the last perhaps partly: at least half of their lanes used
  return 2 * tiles_w >= ceil_div(tiles_w, L) * L ? 1 : 0;
}

// Output channels per block for k of them: the most of kMaxKR, 8 or 4 that divides k (0: none).
int64_t block_width(int64_t k) {
  for (int64_t kr = kMaxKR; kr >= 4; kr /= 2)
    if (k % kr == 0) return kr;
  return 0;
}

// Whether the group of tiles from tile row ty and tile column tx, `rows` tile rows per vector,
// overhangs the output: at the right or bottom edge (one tile row per vector), or with segments
// that a tile row does not fill, or tile rows past the bottom (2 or 4 per vector). Such a group's
// patch rows are copied zero-extended, and only its pixels inside the output are stored.
bool edge_group(const Conv2dGeometry& g, int64_t rows, int64_t ty, int64_t tx) {
  if (rows == 1) return 2 * (tx + L) > g.out_w() || 2 * ty + 2 > g.out_h();
  return ceil_div(g.out_w(), 2) * rows != L || g.out_w() % 2 != 0 || 2 * (ty + rows) > g.out_h();
}

// `count` columns of an input row from column `first` on (null: a row above or below the image),
// zero outside the image.
void stage_columns(const float* row, int64_t w, int64_t first, int64_t count, float* stage) {
  const int64_t lo = std::max<int64_t>(0, first), hi = std::min(w, first + count);
  std::fill(stage, stage + count, 0.0f);
  if (row != nullptr && hi > lo) std::memcpy(stage + (lo - first), row + lo, (hi - lo) * sizeof(float));
}

// U = G g G^T for every (k, c) filter, as u[xi][k block][c][KR] (the sums' broadcast order):
// One(g, r) writes filter g's P transformed values to r[xi * kMaxKR]. Made a (k block, c) at a time, so
// that each of the P destinations gets KR adjacent floats.
template <int P, void (*One)(const float*, float*)>
void transform_filters(const float* w, int64_t k_n, int64_t c_n, int64_t kr_n, float* u) {
  const int64_t kblocks = k_n / kr_n;
  parallel_for(kblocks * c_n, std::max<int64_t>(1, 32768 / (P * kr_n)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t kb = i / c_n, c = i % c_n;
      float r[P][kMaxKR];
      for (int64_t kr = 0; kr < kr_n; ++kr) One(w + ((kb * kr_n + kr) * c_n + c) * 9, &r[0][kr]);
      for (int xi = 0; xi < P; ++xi)
        copy_bytes(reinterpret_cast<char*>(u + ((xi * kblocks + kb) * c_n + c) * kr_n),
                   reinterpret_cast<const char*>(r[xi]), kr_n * sizeof(float));  // not a call: 16 to 64 bytes
    }
  });
}

// F(2x2)'s G g G^T of one filter, to r[xi * kMaxKR].
void transform_filter2(const float* g, float* r) {
  float t[4][3];
  for (int j = 0; j < 3; ++j) {
    t[0][j] = g[j];
    t[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
    t[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
    t[3][j] = g[6 + j];
  }
  for (int e = 0; e < 4; ++e) {
    r[(4 * e) * kMaxKR] = t[e][0];
    r[(4 * e + 1) * kMaxKR] = 0.5f * (t[e][0] + t[e][1] + t[e][2]);
    r[(4 * e + 2) * kMaxKR] = 0.5f * (t[e][0] - t[e][1] + t[e][2]);
    r[(4 * e + 3) * kMaxKR] = t[e][2];
  }
}

// m[xi][kr] = the sum over channels of u[xi][kb][c][kr] * v[xi][c], for the P transformed
// positions of a group of tiles and a block of KR output channels: KR accumulators of L tiles,
// each input vector times KR broadcast transformed weights.
template <int P, int64_t KR> void products(const float* u, int64_t kblocks, int64_t c_n, const V* v, int64_t kb, V* m) {
  for (int xi = 0; xi < P; ++xi) {
    V acc[KR] = {};
    const float* uk = u + (xi * kblocks + kb) * c_n * KR;
    const V* vx = v + xi * c_n;
    for (int64_t c = 0; c < c_n; ++c, uk += KR) {
      const V vc = vx[c];
#pragma GCC unroll 16
      for (int64_t kr = 0; kr < KR; ++kr) acc[kr] += uk[kr] * vc;
    }
    for (int64_t kr = 0; kr < KR; ++kr) m[xi * KR + kr] = acc[kr];
  }
}

template <int ROWS, int64_t KR> struct Winograd {
  static constexpr int kPositions = kXi;
  static constexpr int64_t kKR = KR;
  const Conv2dGeometry& g;  // padding 0 or 1
  const float* u;           // transformed filters (transform_filters)
  const float* bias;        // [k], or null
  Epilogue<float> ep;
  int64_t kblocks;

  int64_t ow() const { return g.out_w(); }
  int64_t tiles_w() const { return ceil_div(ow(), 2); }  // an odd size ends in half tiles
  int64_t groups_per_row() const { return ROWS == 1 ? ceil_div(tiles_w(), L) : 1; }
  int64_t groups() const { return ceil_div(ceil_div(g.out_h(), 2), ROWS) * groups_per_row(); }
  int64_t ty0(int64_t grp) const { return grp / groups_per_row() * ROWS; }  // the group's first tile
  int64_t tx0(int64_t grp) const { return grp % groups_per_row() * L; }
  bool edge(int64_t grp) const { return edge_group(g, ROWS, ty0(grp), tx0(grp)); }

  // An edge group's patch row i: the 2L / ROWS columns from 2 * tx + `from` - pad on of each of
  // its tile rows' input rows, one after the other (stage_columns).
  void edge_rows(const float* plane, int64_t ty, int64_t tx, int i, int64_t from, float* stage) const {
    constexpr int64_t kSeg = 2 * L / ROWS;
    for (int q = 0; q < ROWS; ++q) {
      const int64_t r = 2 * (ty + q) + i - g.pad_h;
      stage_columns(r >= 0 && r < g.h ? plane + r * g.w : nullptr, g.w, 2 * tx + from - g.pad_w, kSeg,
                    stage + q * kSeg);
    }
  }

  // v[xi][c] = B^T d B for the patches of the group's tiles in every channel of x (one image).
  // With padding 1 the padding is never copied: patch column j of tile t reads input column
  // 2t + j - 1, so of the input's even (E) and odd (O) columns (split2), d1 = E and d2 = O, and
  // d0 and d3 are O and E moved by one tile, the padding's zero (or a neighbouring group's
  // column) entering at the ends. A row above or below the image reads `zeros`. Without padding
  // the patch rows are loaded at columns 0 and 2 and split into even and odd.
  void input(const float* x, int64_t grp, V* v, const float* zeros) const {
    constexpr int S = int(L) / ROWS;  // tiles per tile row in a vector
    const int64_t w = g.w, h = g.h, c_n = g.c, ty = ty0(grp), tx = tx0(grp), pad = g.pad_h;
    for (int64_t c = 0; c < c_n; ++c) {
      const float* plane = x + c * h * w;
      V t[4][4];
      for (int i = 0; i < 4; ++i) {
        const float* row[ROWS];
        for (int q = 0; q < ROWS; ++q) {
          const int64_t r = 2 * (ty + q) + i - pad;
          row[q] = (r >= 0 && r < h ? plane + r * w : zeros) + 2 * tx;
        }
        V d0, d1, d2, d3;
        if (edge(grp)) {  // the patch columns from copies: those at 2t - pad and 2t + 2 - pad
          V a, b, a2, b2;
          alignas(64) float stage[2][2 * L];
          edge_rows(plane, ty, tx, i, 0, stage[0]);
          edge_rows(plane, ty, tx, i, 2, stage[1]);
          load_seq<1>(stage[0], 0, a, b);
          load_seq<1>(stage[1], 0, a2, b2);
          split2(a, b, d0, d1), split2(a2, b2, d2, d3);
        } else if (pad == 0) {
          V a, b, a2, b2;
          load_seq<ROWS>(row[0], 2 * w, a, b);
          load_seq<ROWS>(row[0] + 2, 2 * w, a2, b2);
          split2(a, b, d0, d1), split2(a2, b2, d2, d3);
        } else {
          V x0, x1, before{}, after{};
          if constexpr (ROWS == 1) {
            x0 = load_vector<V>(row[0]), x1 = load_vector<V>(row[0] + L);
            if (tx > 0) before[0] = row[0][-1];
            if (2 * tx + 2 * L < w) after[0] = row[0][2 * L];
          } else if constexpr (ROWS == 2) {
            x0 = load_vector<V>(row[0]), x1 = load_vector<V>(row[1]);
          } else {
            x0 = concat(load_vector<H>(row[0]), load_vector<H>(row[1]), kLanes);
            x1 = concat(load_vector<H>(row[2]), load_vector<H>(row[3]), kLanes);
          }
          V e, o;
          split2(x0, x1, e, o);
          d0 = Tiles<2>::left<S>(o, before), d1 = e, d2 = o, d3 = Tiles<2>::right<S>(e, after);
        }
        t[i][0] = d0 - d2, t[i][1] = d1 + d2, t[i][2] = d2 - d1, t[i][3] = d1 - d3;
      }
      for (int j = 0; j < 4; ++j) {
        v[(0 + j) * c_n + c] = t[0][j] - t[2][j];
        v[(4 + j) * c_n + c] = t[1][j] + t[2][j];
        v[(8 + j) * c_n + c] = t[2][j] - t[1][j];
        v[(12 + j) * c_n + c] = t[1][j] - t[3][j];
      }
    }
  }

  // y's tiles of the group for channels kb*KR + [0, KR): A^T m A + bias, then the epilogue.
  void output(const V* m, int64_t grp, int64_t kb, float* y, const float* res) const {
    constexpr int64_t kSeg = 2 * L / ROWS;  // a tile row's output columns in a vector pair
    // (the output's size in locals: a store through memcpy may alias g, and g.out_h() divides)
    const int64_t ow_n = ow(), oh_n = g.out_h(), plane = oh_n * ow_n, ty = ty0(grp), at = 2 * ty * ow_n + 2 * tx0(grp);
    const bool staged = edge(grp);
    const int64_t cols = std::min<int64_t>(kSeg, ow_n - 2 * tx0(grp));  // a segment's columns inside
    for (int64_t kr = 0; kr < KR; ++kr) {
      const int64_t k = kb * KR + kr;
      V s[2][4], out[2][2];
      for (int j = 0; j < 4; ++j) {
        const V m0 = m[j * KR + kr], m1 = m[(4 + j) * KR + kr], m2 = m[(8 + j) * KR + kr], m3 = m[(12 + j) * KR + kr];
        s[0][j] = m0 + m1 + m2, s[1][j] = m1 - m2 - m3;
      }
      const float b = bias != nullptr ? bias[k] : 0.0f;
      for (int a = 0; a < 2; ++a) {
        out[a][0] = s[a][0] + s[a][1] + s[a][2] + b;
        out[a][1] = s[a][1] - s[a][2] - s[a][3] + b;
      }
      for (int a = 0; a < 2; ++a) {
        V lo, hi;
        merge2(out[a][0], out[a][1], lo, hi);
        // tile row q's output row 2 * (ty + q) + a starts at off + 2 * q * ow_n; an edge group
        // stores the segments whose row is inside the output, `cols` pixels each, staged
        const int64_t off = k * plane + at + a * ow_n;
        const int64_t rows = std::clamp<int64_t>(ceil_div(std::max<int64_t>(0, oh_n - 2 * ty - a), 2), 0, ROWS);
        alignas(64) float part[2 * L] = {};
        if (ep.residual != nullptr) {
          V rlo, rhi;
          if (staged) {
            for (int64_t q = 0; q < rows; ++q)
              std::memcpy(part + q * kSeg, res + off + 2 * q * ow_n, cols * sizeof(float));
            load_seq<1>(part, 0, rlo, rhi);
          } else {
            load_seq<ROWS>(res + off, 2 * ow_n, rlo, rhi);
          }
          lo = lo + rlo, hi = hi + rhi;
        }
        if (ep.relu) {  // as kern::relu: NaN stays
          lo = lo > 0 ? lo : (lo != lo ? lo : V{});
          hi = hi > 0 ? hi : (hi != hi ? hi : V{});
        }
        if (staged) {
          store_seq<1>(part, 0, lo, hi);
          for (int64_t q = 0; q < rows; ++q) std::memcpy(y + off + 2 * q * ow_n, part + q * kSeg, cols * sizeof(float));
        } else {
          store_seq<ROWS>(y + off, 2 * ow_n, lo, hi);
        }
      }
    }
  }
};

// ---- F(4x4, 3x3) ------------------------------------------------------------------------------
// Each 4x4 output tile from its 6x6 input patch: 36 products per tile and channel pair where
// F(2x2) makes 64 for the same 16 pixels and a direct sum 144. Its transforms multiply by up to 8
// and its filter transform by sixths, so its results stray further from the direct sum than
// F(2x2)'s (about 2e-6 of the output's magnitude against 4e-7). Taken for padding 1 where the
// tiles fill the vectors exactly (winograd4_fits): no edge groups.
constexpr int kXi4 = 36;  // transformed positions per tile (6x6)

// The input transform along one axis, B^T d (points 0, +-1, +-2 and infinity).
inline void input_transform6(V d0, V d1, V d2, V d3, V d4, V d5, V* r) {
  const V a = d4 - 4.0f * d2, b = d3 - 4.0f * d1, c = d4 - d2, e = 2.0f * (d3 - d1);
  r[0] = 4.0f * d0 - 5.0f * d2 + d4;
  r[1] = a + b, r[2] = a - b, r[3] = c + e, r[4] = c - e;
  r[5] = 4.0f * d1 - 5.0f * d3 + d5;
}
// The output transform along one axis, A^T m: six sums to four pixels.
inline void output_transform6(V m0, V m1, V m2, V m3, V m4, V m5, V* o) {
  const V a = m1 + m2, b = m1 - m2, c = m3 + m4, d = m3 - m4;
  o[0] = m0 + a + c, o[1] = b + 2.0f * d, o[2] = a + 4.0f * c, o[3] = b + 8.0f * d + m5;
}

// The filter transform along one axis, G g: three taps to six (in double: U is rounded once).
inline void filter_transform6(double a, double b, double c, double* t) {
  constexpr double kSixth = 1.0 / 6, kTwentyFourth = 1.0 / 24;
  const double p = a + c, q = a + 4 * c;
  t[0] = 0.25 * a, t[1] = -(p + b) * kSixth, t[2] = -(p - b) * kSixth;
  t[3] = (q + 2 * b) * kTwentyFourth, t[4] = (q - 2 * b) * kTwentyFourth;
  t[5] = c;
}

// F(4x4)'s G g G^T of one filter, to r[xi * kMaxKR].
void transform_filter4(const float* g, float* r) {
  double t[3][6], col[6];  // t[tap column][row]
  for (int j = 0; j < 3; ++j) filter_transform6(g[j], g[3 + j], g[6 + j], t[j]);
  for (int a = 0; a < 6; ++a) {
    filter_transform6(t[0][a], t[1][a], t[2][a], col);
    for (int b = 0; b < 6; ++b) r[(6 * a + b) * kMaxKR] = float(col[b]);
  }
}

// 4L floats in ROWS segments of 4L/ROWS, segment q at p[q], as four vectors (and back).
template <int ROWS> void load_quad(const float* const* p, V* x) {
  for (int i = 0; i < 4; ++i) x[i] = load_vector<V>(p[i * ROWS / 4] + (i % (4 / ROWS)) * L);
}
template <int ROWS> void store_quad(float* const* p, const V* x) {
  for (int i = 0; i < 4; ++i) std::memcpy(p[i * ROWS / 4] + (i % (4 / ROWS)) * L, &x[i], sizeof(V));
}

// Rows per vector for F(4x4): 1 when a row is whole vectors of tiles, 2 or 4 when that many rows
// of tiles fill a vector; 0 when the tiles do not fill vectors exactly.
int64_t rows_per_vector4(const Conv2dGeometry& g) {
  if (g.out_w() % 4 != 0 || g.out_h() % 4 != 0) return 0;
  const int64_t tiles_w = g.out_w() / 4, tiles_h = g.out_h() / 4;
  if (tiles_w == 0 || tiles_h == 0) return 0;
  if (tiles_w % L == 0) return 1;
  for (int64_t rows : {2, 4})
    if (tiles_w * rows == L && tiles_h % rows == 0) return rows;
  return 0;
}

template <int ROWS, int64_t KR> struct Winograd4 {
  static constexpr int kPositions = kXi4;
  static constexpr int64_t kKR = KR;
  const Conv2dGeometry& g;  // padding 1, tiles filling the vectors (rows_per_vector4)
  const float* u;           // transformed filters (transform_filter4)
  const float* bias;        // [k], or null
  Epilogue<float> ep;
  int64_t kblocks;

  int64_t groups_per_row() const { return ROWS == 1 ? g.out_w() / 4 / L : 1; }
  int64_t groups() const { return g.out_h() / 4 / ROWS * groups_per_row(); }
  int64_t ty0(int64_t grp) const { return grp / groups_per_row() * ROWS; }  // the group's first tile
  int64_t tx0(int64_t grp) const { return grp % groups_per_row() * L; }

  // v[xi][c] = B^T d B for the patches of the group's tiles in every channel of x (one image).
  // Patch column j of tile t reads input column 4t + j - 1: of the input's columns by their
  // remainder mod 4 (P0 .. P3, transpose4), d1 .. d4 are P0 .. P3, and d0 and d5 are P3 and P0
  // moved by one tile, the padding's zero (or a neighbouring group's column) entering at the ends.
  // A row above or below the image reads `zeros`.
  void input(const float* x, int64_t grp, V* v, const float* zeros) const {
    constexpr int S = int(L) / ROWS;  // tiles per tile row in a vector
    const int64_t w = g.w, h = g.h, c_n = g.c, ty = ty0(grp), tx = tx0(grp);
    for (int64_t c = 0; c < c_n; ++c) {
      const float* plane = x + c * h * w;
      V t[6][6];
      for (int i = 0; i < 6; ++i) {
        const float* row[ROWS];
        for (int q = 0; q < ROWS; ++q) {
          const int64_t r = 4 * (ty + q) + i - 1;
          row[q] = (r >= 0 && r < h ? plane + r * w : zeros) + 4 * tx;
        }
        V xs[4], before{}, after{};
        load_quad<ROWS>(row, xs);
        if constexpr (ROWS == 1) {
          if (tx > 0) before[0] = row[0][-1];
          if (4 * (tx + L) < w) after[0] = row[0][4 * L];
        }
        transpose4(xs);  // the tiles' columns 0..3
        input_transform6(Tiles<4>::left<S>(xs[3], before), xs[0], xs[1], xs[2], xs[3], Tiles<4>::right<S>(xs[0], after),
                         t[i]);
      }
      for (int j = 0; j < 6; ++j) {
        V r[6];
        input_transform6(t[0][j], t[1][j], t[2][j], t[3][j], t[4][j], t[5][j], r);
        for (int a = 0; a < 6; ++a) v[(6 * a + j) * c_n + c] = r[a];
      }
    }
  }

  // y's tiles of the group for channels kb*KR + [0, KR): A^T m A + bias, then the epilogue; each
  // output row's four column phases interleaved back into pixels (two rounds of zips).
  void output(const V* m, int64_t grp, int64_t kb, float* y, const float* res) const {
    // (the output's size in locals: a store through memcpy may alias g)
    const int64_t ow_n = g.out_w(), plane = g.out_h() * ow_n, at = 4 * ty0(grp) * ow_n + 4 * tx0(grp);
    for (int64_t kr = 0; kr < KR; ++kr) {
      const int64_t k = kb * KR + kr;
      V s[6][4];  // s[column][output row]: A^T along the patch's rows
      for (int j = 0; j < 6; ++j) {
        const V* mj = m + j * KR + kr;
        output_transform6(mj[0], mj[6 * KR], mj[12 * KR], mj[18 * KR], mj[24 * KR], mj[30 * KR], s[j]);
      }
      const float b = bias != nullptr ? bias[k] : 0.0f;
      for (int j = 0; j < 4; ++j) {  // output row j of each tile: A^T along its columns
        V o[4];
        output_transform6(s[0][j], s[1][j], s[2][j], s[3][j], s[4][j], s[5][j], o);
        transpose4(o);  // the tiles' columns back into pixels
        V px[4] = {o[0] + b, o[1] + b, o[2] + b, o[3] + b};
        // tile row q's output row 4 * (ty + q) + j starts at off + 4 * q * ow_n
        const int64_t off = k * plane + at + j * ow_n;
        float* rows[ROWS];
        for (int q = 0; q < ROWS; ++q) rows[q] = y + off + 4 * q * ow_n;
        if (ep.residual != nullptr) {
          const float* rrows[ROWS];
          for (int q = 0; q < ROWS; ++q) rrows[q] = res + off + 4 * q * ow_n;
          V rv[4];
          load_quad<ROWS>(rrows, rv);
          for (int i = 0; i < 4; ++i) px[i] = px[i] + rv[i];
        }
        if (ep.relu)  // as kern::relu: NaN stays
          for (V& p : px) p = p > 0 ? p : (p != p ? p : V{});
        store_quad<ROWS>(rows, px);
      }
    }
  }
};

// The forward over the pool with kernel K (Winograd or Winograd4). A unit is one group of tiles
// of one image and a run of channel blocks (all of them, unless there are too few groups to share
// among the threads).
template <class K> void forward(const K& wino, const float* x, float* y) {
  const Conv2dGeometry& g = wino.g;
  const Epilogue<float>& ep = wino.ep;
  const int64_t groups = wino.groups(), kblocks = wino.kblocks;
  const int64_t in_img = g.c * g.h * g.w, out_img = g.k * g.out_h() * g.out_w();
  const int64_t want = 2 * int64_t(num_threads());  // units enough to share
  const int64_t kchunks = g.n * groups >= want ? 1 : std::min(kblocks, ceil_div(want, g.n * groups));
  const int64_t per_chunk = ceil_div(kblocks, kchunks), per_image = groups * kchunks;
  // The rows above and below the image: zeros, with room for a group's reads around them.
  const std::vector<float> zeros(static_cast<size_t>(g.w + 2 * L));
  parallel_for(g.n * per_image, 1, [&](int64_t u0, int64_t u1) {
    alloc::Scratch<V> v(static_cast<size_t>(K::kPositions * g.c)), m(static_cast<size_t>(K::kPositions * K::kKR));
    int64_t transformed = -1;
    for (int64_t unit = u0; unit < u1; ++unit) {
      const int64_t b = unit / per_image, grp = unit % per_image / kchunks, chunk = unit % kchunks;
      if (unit / kchunks != transformed) wino.input(x + b * in_img, grp, v.data(), zeros.data() + L);
      transformed = unit / kchunks;
      const float* res = ep.residual != nullptr ? ep.residual + b * out_img : nullptr;
      for (int64_t kb = chunk * per_chunk; kb < std::min(kblocks, (chunk + 1) * per_chunk); ++kb) {
        products<K::kPositions, K::kKR>(wino.u, kblocks, g.c, v.data(), kb, m.data());
        wino.output(m.data(), grp, kb, y + b * out_img, res);
      }
    }
  });
}

template <template <int, int64_t> class K, int ROWS> void forward_rows(const Conv2dGeometry& g, const float* x,
                                                                       const float* u, const float* bias, float* y,
                                                                       const Epilogue<float>& ep) {
  const int64_t kr = block_width(g.k);
  if constexpr (kMaxKR >= 16) {
    if (kr == 16) return forward(K<ROWS, 16>{g, u, bias, ep, g.k / 16}, x, y);
  }
  if (kr == 8) return forward(K<ROWS, 8>{g, u, bias, ep, g.k / 8}, x, y);
  forward(K<ROWS, 4>{g, u, bias, ep, g.k / 4}, x, y);
}

}  // namespace

// Measured faster than the other kernels for every such shape tried, from 1 to 256 input and 4
// to 256 output channels at batch 1 to 32, even with the filters transformed on every call (Zen
// 5, 2 threads: 1.04-1.7x on AVX-512 and 1.4-2.8x on AVX2 against the direct kernel; 1.3-1.5x
// against the plane kernels at 4 and 8 output channels).
bool winograd_forward(const Conv2dGeometry& g) {
  if (!(g.groups == 1 && g.kh == 3 && g.kw == 3 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == g.pad_w &&
        g.pad_h <= 1 && block_width(g.k) != 0))
    return false;
  if (g.pad_h == 1 && rows_per_vector4(g) != 0) return true;
  const int64_t rows = rows_per_vector(g);
  if (rows == 0) return false;
  // Rows that end in a partial vector or segment copy their patch rows (edge groups): that pays
  // for itself from 64 output channels on (28 and 56 wide: 1.2-1.4x at 64 and 128 channels, 1.0x
  // at 32, 0.74-0.83x at 16).
  // Edge groups come last (the bottom right): there are some when the last group is one.
  const int64_t tiles_w = ceil_div(g.out_w(), 2), tiles_h = ceil_div(g.out_h(), 2);
  const int64_t last_ty = (ceil_div(tiles_h, rows) - 1) * rows,
                last_tx = rows == 1 ? (ceil_div(tiles_w, L) - 1) * L : 0;
  return !edge_group(g, rows, last_ty, last_tx) || g.k >= 64;
}

void conv2d_forward_winograd(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y,
                             Storage* constant_w, const Epilogue<float>& ep) {
  const int64_t kr = block_width(g.k);
  // F(4x4) for constant weights (an inference graph's) only: in training its rounding error went
  // into a ResNet's batch-normalised weight gradients beyond ten times PyTorch's own float32 error.
  if (const int64_t rows = constant_w != nullptr && g.pad_h == 1 ? rows_per_vector4(g) : 0; rows != 0) {
    const PreparedWeights<float> prepared(constant_w, w, {'w', 4, g.k, g.c, kr}, kXi4 * g.k * g.c, [&](float* out) {
      transform_filters<kXi4, transform_filter4>(w, g.k, g.c, kr, out);
    });
    const float* u = prepared.data();
    switch (rows) {
      case 1: return forward_rows<Winograd4, 1>(g, x, u, bias, y, ep);
      case 2: return forward_rows<Winograd4, 2>(g, x, u, bias, y, ep);
      default: return forward_rows<Winograd4, 4>(g, x, u, bias, y, ep);
    }
  }
  const PreparedWeights<float> prepared(constant_w, w, {'w', g.k, g.c, kr}, kXi * g.k * g.c, [&](float* out) {
    transform_filters<kXi, transform_filter2>(w, g.k, g.c, kr, out);
  });
  const float* u = prepared.data();
  switch (rows_per_vector(g)) {
    case 1: return forward_rows<Winograd, 1>(g, x, u, bias, y, ep);
    case 2: return forward_rows<Winograd, 2>(g, x, u, bias, y, ep);
    default: return forward_rows<Winograd, 4>(g, x, u, bias, y, ep);
  }
}

}  // namespace nexus::ops::cpu::NX_CPU_VARIANT
