#include "ops/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "base/thread_pool.h"
#include "ops/cpu/loops.h"           // sum_in_lanes
#include "ops/ops.h"                 // copy_
#include "codegen/kernel_prelude.h"  // kern::add: integer sums wrap as numpy's, without UB

namespace nexus::ops::cpu::NX_CPU_VARIANT {
namespace {

// Float sums accumulate 16 lanes in double (each value widened, as fused kernels' sums) over
// blocks of kBlock, block totals in double: better than numpy's pairwise sums at streaming speed,
// and a result that does not depend on the thread count.
constexpr int64_t kLanes = 16;
constexpr int64_t kBlock = 1 << 14;

template <class T> using SumAcc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <class T> SumAcc<T> sum_block(const T* x, int64_t n) {
  if constexpr (std::is_floating_point_v<T>) {
    return sum_in_lanes(x, n);
  } else {
    int64_t acc = 0;
    for (int64_t i = 0; i < n; ++i) acc = kern::add(acc, int64_t(x[i]));
    return acc;
  }
}

// max/min with numpy's NaN propagation.
template <class T> inline T pick(ReduceOp op, T acc, T v) {
  bool nan = false;
  if constexpr (std::is_floating_point_v<T>) nan = v != v;
  return (nan || (op == ReduceOp::Max ? v > acc : v < acc)) ? v : acc;
}

template <class T> T extremum_block(ReduceOp op, const T* x, int64_t n) {
  T lanes[kLanes];
  for (int64_t j = 0; j < kLanes; ++j) lanes[j] = x[0];
  int64_t i = 0;
  if (op == ReduceOp::Max) {
    for (; i + kLanes <= n; i += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) lanes[j] = pick(ReduceOp::Max, lanes[j], x[i + j]);
  } else {
    for (; i + kLanes <= n; i += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) lanes[j] = pick(ReduceOp::Min, lanes[j], x[i + j]);
  }
  T acc = lanes[0];
  for (int64_t j = 1; j < kLanes; ++j) acc = pick(op, acc, lanes[j]);
  for (; i < n; ++i) acc = pick(op, acc, x[i]);
  return acc;
}

// Reduces one contiguous row; R is the output type.
template <class T, class R> R reduce_row(ReduceOp op, const T* x, int64_t n) {
  if (op != ReduceOp::Sum) return R(extremum_block(op, x, n));
  SumAcc<T> acc = 0;
  for (int64_t b = 0; b < n; b += kBlock) acc = kern::add(acc, sum_block(x + b, std::min(kBlock, n - b)));
  return R(acc);
}

template <class T, class R> void reduce_rows(ReduceOp op, R* out, const T* x, int64_t rows, int64_t n) {
  if (rows == 1 && n > 2 * kBlock) {  // one long row: fixed blocks in parallel, combined in order
    int64_t nblocks = (n + kBlock - 1) / kBlock;
    std::vector<SumAcc<T>> sums(size_t(op == ReduceOp::Sum ? nblocks : 0));
    std::unique_ptr<T[]> ext(new T[size_t(nblocks)]);
    parallel_for(nblocks, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        int64_t len = std::min(kBlock, n - i * kBlock);
        if (op == ReduceOp::Sum) sums[i] = sum_block(x + i * kBlock, len);
        else ext[i] = extremum_block(op, x + i * kBlock, len);
      }
    });
    if (op == ReduceOp::Sum) {
      SumAcc<T> acc = 0;
      for (auto v : sums) acc = kern::add(acc, v);
      out[0] = R(acc);
    } else {
      out[0] = R(extremum_block(op, ext.get(), nblocks));
    }
    return;
  }
  int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n, 1));
  parallel_for(rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) out[r] = reduce_row<T, R>(op, x + r * n, n);
  });
}

// out[a, j] = reduce_r x[a, r, j] for a contiguous (A, R, B) block; vectorised along j.
template <class T, class R> void reduce_middle(ReduceOp op, R* out, const T* x, int64_t A, int64_t Rn, int64_t B) {
  using Acc = std::conditional_t<std::is_same_v<R, T>, T, SumAcc<T>>;
  int64_t cols_per_task = std::max<int64_t>(64, kElementwiseGrain / std::max<int64_t>(Rn, 1));
  int64_t col_tasks = (B + cols_per_task - 1) / cols_per_task;
  parallel_for(A * col_tasks, 1, [&](int64_t tb, int64_t te) {
    std::unique_ptr<Acc[]> acc(new Acc[size_t(cols_per_task)]);
    for (int64_t t = tb; t < te; ++t) {
      int64_t a = t / col_tasks, j0 = (t % col_tasks) * cols_per_task;
      int64_t nj = std::min(cols_per_task, B - j0);
      const T* base = x + a * Rn * B + j0;
      for (int64_t j = 0; j < nj; ++j) acc[j] = Acc(base[j]);
      for (int64_t r = 1; r < Rn; ++r) {
        const T* row = base + r * B;
        if (op == ReduceOp::Sum) {
          for (int64_t j = 0; j < nj; ++j) acc[j] = kern::add(acc[j], Acc(row[j]));
        } else {
          for (int64_t j = 0; j < nj; ++j) acc[j] = pick(op, acc[j], Acc(row[j]));
        }
      }
      for (int64_t j = 0; j < nj; ++j) out[a * B + j0 + j] = R(acc[j]);
    }
  });
}

// out[k] = reduce over a, b of x[a, k, b] for a contiguous (A, K, B) block (the kept axes in
// the middle: a batch norm's per-channel sums over (N, H, W)); channels in parallel, each in a
// fixed order.
template <class T, class R> void reduce_outer_inner(ReduceOp op, R* out, const T* x, int64_t A, int64_t K, int64_t B) {
  using Acc = std::conditional_t<std::is_same_v<R, T> && !std::is_floating_point_v<T>, T, SumAcc<T>>;
  parallel_for(K, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(A * B, 1)), [&](int64_t kb, int64_t ke) {
    for (int64_t k = kb; k < ke; ++k) {
      if (op != ReduceOp::Sum) {
        T acc = extremum_block(op, x + k * B, B);
        for (int64_t a = 1; a < A; ++a) acc = pick(op, acc, extremum_block(op, x + (a * K + k) * B, B));
        out[k] = R(acc);
        continue;
      }
      Acc acc = 0;
      for (int64_t a = 0; a < A; ++a)
        for (int64_t b = 0; b < B; b += kBlock)
          acc = kern::add(acc, Acc(sum_block(x + (a * K + k) * B + b, std::min(kBlock, B - b))));
      out[k] = R(acc);
    }
  });
}

template <class T, class R>
void reduce_typed(ReduceOp op, const Tensor& out, const Tensor& x, const std::vector<int64_t>& axes) {
  const int64_t nd = x.ndim();
  R* o = out.data<R>();
  if (x.numel() == 0) {  // only sums reach here with empty input (front end checks max/min)
    for (int64_t i = 0; i < out.numel(); ++i) o[i] = R(0);
    return;
  }
  bool block = true;  // are the reduced axes one consecutive run?
  for (size_t i = 1; i < axes.size(); ++i) block = block && axes[i] == axes[i - 1] + 1;
  if (x.is_contiguous() && block) {
    int64_t A = 1, Rn = 1, B = 1;
    for (int64_t d = 0; d < nd; ++d) {
      if (d < axes.front()) A *= x.shape()[d];
      else if (d <= axes.back()) Rn *= x.shape()[d];
      else B *= x.shape()[d];
    }
    if (B == 1) return reduce_rows<T, R>(op, o, x.data<T>(), A, Rn);
    return reduce_middle<T, R>(op, o, x.data<T>(), A, Rn, B);
  }
  // The kept axes one run in the middle, the reduced ones before and after it.
  int64_t first_kept = 0, last_kept = -1;
  while (first_kept < nd && std::binary_search(axes.begin(), axes.end(), first_kept)) ++first_kept;
  for (int64_t d = first_kept; d < nd && !std::binary_search(axes.begin(), axes.end(), d); ++d) last_kept = d;
  bool middle = x.is_contiguous() && first_kept > 0 && last_kept >= first_kept && last_kept < nd - 1;
  for (int64_t d = last_kept + 1; middle && d < nd; ++d) middle = std::binary_search(axes.begin(), axes.end(), d);
  if (middle) {
    int64_t A = 1, K = 1, B = 1;
    for (int64_t d = 0; d < nd; ++d) (d < first_kept ? A : d <= last_kept ? K : B) *= x.shape()[d];
    return reduce_outer_inner<T, R>(op, o, x.data<T>(), A, K, B);
  }
  // General: pack as (kept..., reduced...) then reduce rows.
  std::vector<bool> red(size_t(nd), false);
  for (int64_t a : axes) red[a] = true;
  Shape shape;
  Strides strides;
  int64_t Rn = 1;
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t d = 0; d < nd; ++d)
      if (red[d] == (pass == 1)) {
        shape.push_back(x.shape()[d]);
        strides.push_back(x.strides()[d]);
        if (pass == 1) Rn *= x.shape()[d];
      }
  Tensor packed = Tensor::empty(shape, x.dtype());
  copy_(packed, Tensor::view_of(x.storage(), x.offset(), shape, strides, x.dtype()));
  reduce_rows<T, R>(op, o, packed.data<T>(), x.numel() / Rn, Rn);
}

// One pass over x for a run of channels [cb, ce): the sums of x - K and (x - K)^2 per channel,
// K the channel's first value (a shift that keeps the second sum small where the mean is large
// against the spread); then mean = K + s1 / n and var = s2 / n - (s1 / n)^2. Images are read in
// order, each image's rows of the run one after the other (contiguous), into T lanes over 16
// vectors at a time, added into double lanes per channel; every channel's sums take the same
// steps whichever run holds it, so the result does not depend on the thread count.
template <class T>
void channel_stats_run(double* out, const T* x, int64_t N, int64_t C, int64_t S, int64_t cb, int64_t ce) {
  const int64_t nc = ce - cb, vec_end = S / kLanes * kLanes;
  std::vector<double> lanes(size_t(nc * 2 * kLanes), 0.0);
  std::vector<double> sums(size_t(nc * 2), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < nc; ++c) {
      const T* row = x + (n * C + cb + c) * S;
      const T shift = x[(cb + c) * S];
      // kLanes values as one vector (the compiler splits it into what the variant has), summed in
      // T over at most 16 vectors, then widened into double lanes kept in locals
      typedef T V __attribute__((vector_size(kLanes * sizeof(T))));  // (a `using` drops it)
      typedef double VD __attribute__((vector_size(kLanes * sizeof(double))));
      double* lane = &lanes[size_t(c * 2 * kLanes)];
      VD s1, s2;
      std::memcpy(&s1, lane, sizeof(VD));
      std::memcpy(&s2, lane + kLanes, sizeof(VD));
      for (int64_t i0 = 0; i0 < vec_end; i0 += 16 * kLanes) {
        V a1 = {}, a2 = {};
        for (int64_t i = i0; i < std::min(vec_end, i0 + 16 * kLanes); i += kLanes) {
          V d;
          std::memcpy(&d, row + i, sizeof(V));
          d -= shift;
          a1 += d;
          a2 += d * d;
        }
        s1 += __builtin_convertvector(a1, VD);
        s2 += __builtin_convertvector(a2, VD);
      }
      std::memcpy(lane, &s1, sizeof(VD));
      std::memcpy(lane + kLanes, &s2, sizeof(VD));
      for (int64_t i = vec_end; i < S; ++i) {
        const double d = double(row[i] - shift);
        sums[size_t(c * 2)] += d, sums[size_t(c * 2 + 1)] += d * d;
      }
    }
  }
  for (int64_t c = 0; c < nc; ++c)  // the lanes in order, after the tails' sums
    for (int64_t k = 0; k < 2; ++k)
      for (int64_t j = 0; j < kLanes; ++j) sums[size_t(c * 2 + k)] += lanes[size_t((c * 2 + k) * kLanes + j)];
  const double count = double(N * S);
  for (int64_t c = 0; c < nc; ++c) {
    const double m = sums[size_t(c * 2)] / count;
    out[cb + c] = double(x[(cb + c) * S]) + m;
    out[C + cb + c] = std::max(0.0, sums[size_t(c * 2 + 1)] / count - m * m);
  }
}

template <class T> void channel_stats_typed(double* out, const T* x, int64_t N, int64_t C, int64_t S) {
  parallel_for(C, 1, [&](int64_t cb, int64_t ce) { channel_stats_run(out, x, N, C, S, cb, ce); });
}

}  // namespace

static void channel_stats_kernel(const Tensor& out, const Tensor& x) {
  const int64_t N = x.dim(0), C = x.dim(1), S = C ? x.numel() / std::max<int64_t>(N * C, 1) : 0;
  if (x.dtype() == DType::Float64) channel_stats_typed(out.data<double>(), x.data<double>(), N, C, S);
  else channel_stats_typed(out.data<double>(), x.data<float>(), N, C, S);
}

static void reduce_kernel(ReduceOp op, const Tensor& out, const Tensor& x, const std::vector<int64_t>& axes) {
  dispatch_compute(x.dtype(), "reduce", [&](auto t) {
    using T = decltype(t);
    if (out.dtype() == x.dtype()) {
      reduce_typed<T, T>(op, out, x, axes);
    } else if constexpr (!std::is_floating_point_v<T>) {
      NX_ASSERT(out.dtype() == DType::Int64, "integer sums accumulate in int64");
      reduce_typed<T, int64_t>(op, out, x, axes);
    } else {
      NX_ASSERT(false, "float reductions keep their dtype");
    }
  });
}

static void argmax_kernel(const Tensor& out, const Tensor& x, int64_t rows, int64_t n) {
  dispatch_compute(x.dtype(), "argmax", [&](auto t) {
    using T = decltype(t);
    const T* px = x.data<T>();
    int64_t* po = out.data<int64_t>();
    parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* row = px + r * n;
        int64_t best = 0;
        for (int64_t i = 1; i < n; ++i) {
          bool nan_best = false;
          if constexpr (std::is_floating_point_v<T>) nan_best = row[best] != row[best];
          if (nan_best) break;
          bool nan = false;
          if constexpr (std::is_floating_point_v<T>) nan = row[i] != row[i];
          if (nan || row[i] > row[best]) best = i;
        }
        po[r] = best;
      }
    });
  });
}

void add_reduce(Kernels& k) {
  k.reduce = reduce_kernel;
  k.argmax = argmax_kernel;
  k.channel_stats = channel_stats_kernel;
}

}  // namespace nexus::ops::cpu::NX_CPU_VARIANT
